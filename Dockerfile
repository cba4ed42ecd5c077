# The multicache daemon as a static binary on distroless, running as an unprivileged user.
#   docker build -t multicache:latest .
# deploy/ runs it in a cluster.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, in their own layer: a source change does not download them again. The daemon,
# cmd/multicache, is a module of its own that uses the library from ../..
COPY go.mod go.sum ./
COPY cmd/multicache/go.mod cmd/multicache/go.sum ./cmd/multicache/
RUN go mod download && go -C cmd/multicache mod download
COPY . .
# make build writes bin/multicache, with cgo off (a static binary).
RUN make build

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /src/bin/multicache /multicache
USER 65532:65532
ENTRYPOINT ["/multicache"]
