// A module of its own, so that golang.org/x/tools is never a dependency of
// the gateway: only CI's check of exported names builds it.
module github.com/goodput/goodput/ci/exportuse

go 1.26.8

require golang.org/x/tools v0.52.0

require (
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
)
