# Build: docker build -t goodput .
# Run:   docker run -p 8080:8080 -p 9090:9090 goodput serve --upstream http://vllm:8000 --admin-listen :9090
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/goodput ./cmd/goodput

FROM debian:bookworm-slim
RUN useradd --system --uid 65532 goodput
COPY --from=build /out/goodput /usr/local/bin/goodput
USER goodput
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/goodput"]
CMD ["serve", "--listen", ":8080", "--admin-listen", ":9090"]
