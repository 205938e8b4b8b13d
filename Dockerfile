# Build:  docker build -t goodput .
#         (docker build --build-arg VERSION=$(git describe --always --dirty) -t goodput .
#          to have goodput version name the commit; .git stays out of the build context)
# Try it: docker run --rm -p 8080:8080 goodput
#         (the built-in simulator; the request log of --request-log requests.jsonl is
#          written to /data, the working directory, which the image's user owns)
# Real engine, metrics for Prometheus:
#         docker run -p 8080:8080 -p 9090:9090 goodput serve --upstream http://vllm:8000 \
#           --listen :8080 --admin-listen :9090 --request-log requests.jsonl
#         The admin listener (/metrics, /admin/api/*) has no authentication: the default
#         command binds it to the container's loopback, where only the health check reaches
#         it; publish it (:9090) only on a private network (the gateway logs a WARNING).
# CI checks this file with .ci/dockerfile-lint (BuildKit's checks, no daemon needed).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o /out/goodput ./cmd/goodput \
 && mkdir -p /out/data /out/tmp && chmod 1777 /out/tmp

# A static binary needs no distribution: the CA certificates (Redis over
# TLS, Prometheus over https for goodput report) come from the build image.
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tmp /tmp
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/goodput /usr/local/bin/goodput
USER 65532:65532
WORKDIR /data
ENV HOME=/data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/goodput", "health", "--admin", "127.0.0.1:9090"]
ENTRYPOINT ["/usr/local/bin/goodput"]
CMD ["serve", "--listen", ":8080", "--admin-listen", "127.0.0.1:9090"]
