# The irs image, for those with Docker: `make image` builds the same image without Docker (internal/imagebuild),
# which CI and the test cluster use. Build from the repository's root:
#   docker build -t ghcr.io/irs-sim/irs:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -tags nomsgpack,grpcnotrace \
    -ldflags "-s -w -X github.com/irs-sim/irs/internal/buildinfo.version=${VERSION}" -o /irs ./cmd/irs

# The static binary alone, as make image makes it.
FROM scratch
COPY --from=build /irs /irs
ENTRYPOINT ["/irs"]
