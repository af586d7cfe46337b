# The irs image, for those with Docker: `make image` builds the same image without Docker (internal/imagebuild),
# which CI and the test cluster use. Build from the repository's root:
#   docker build -t ghcr.io/irs-sim/irs:dev .
FROM node:20 AS assets
WORKDIR /web
COPY web/package.json web/package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The HTML report's chart library, taken from npm as `make assets` takes it.
COPY --from=assets /web/node_modules/uplot/dist/uPlot.iife.min.js /web/node_modules/uplot/dist/uPlot.min.css /web/node_modules/uplot/LICENSE workflows/report/page/assets/vendor/
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -tags nomsgpack,grpcnotrace \
    -ldflags "-s -w -X github.com/irs-sim/irs/internal/buildinfo.version=${VERSION}" -o /irs ./cmd/irs

# The static binary alone, as make image makes it.
FROM scratch
COPY --from=build /irs /irs
ENTRYPOINT ["/irs"]
