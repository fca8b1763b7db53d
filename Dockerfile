# syntax=docker/dockerfile:1
# One image with every Portico binary (bin/* of `make build`) under
# /usr/local/bin; the Helm chart picks the component with `command`.
#
#   docker build -t ghcr.io/portico-io/portico:dev .
#   docker run --rm ghcr.io/portico-io/portico:dev /usr/local/bin/controlplane -h

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
WORKDIR /src
# Static binaries: no libc in the final image.
ENV CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH}
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
# Every */cmd/* directory is a binary, as in the Makefile's `build`.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out && \
    go build -trimpath -ldflags="-s -w" -o /out/ ./*/cmd/*

# distroless static: CA certificates and tzdata (the scheduler's IANA zones),
# no shell, runs as uid 65532.
FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
