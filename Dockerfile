# relay container image.
#
# Invariant: the runtime image holds the relay binary and nothing else of ours, runs as a non-root
# user, and has glibc: confluent-kafka-go links its bundled librdkafka through cgo against glibc, so
# a static or musl image would not run it. Liveness and readiness come from /healthz and /readyz
# (distroless has no shell for a HEALTHCHECK).

FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a source edit does not invalidate the download layer.
COPY go.mod go.sum ./
RUN go mod download
# Only what the binary is built from: the work tree also holds service caches and test binaries.
COPY cmd ./cmd
COPY internal ./internal
ARG VERSION=dev
RUN CGO_ENABLED=1 go build -trimpath \
      -ldflags "-s -w -X github.com/relay-sh/relay/internal/metrics.Version=${VERSION}" \
      -o /out/relay ./cmd/relay

FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/relay /relay
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/relay"]
CMD ["run"]
