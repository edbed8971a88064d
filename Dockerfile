# syntax=docker/dockerfile:1
# Multi-stage build: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# BUILD_TIME (RFC 3339) is printed by `version`; the VCS revision comes from
# Go's build info when .git is in the build context (it is in .dockerignore
# by default, so pass the revision in VERSION for images).
ARG BUILD_TIME=
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.buildTime=${BUILD_TIME}" \
      -o /out/knowledge-sidecar ./cmd/knowledge-sidecar

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/knowledge-sidecar /knowledge-sidecar
USER nonroot:nonroot
EXPOSE 8080 9090
# The admin listener must be reachable by the orchestrator's probes:
# set KNOWLEDGE_SIDECAR_ADMIN_LISTEN=:9090 and probe /healthz and /readyz.
ENV KNOWLEDGE_SIDECAR_ADMIN_LISTEN=:9090
ENTRYPOINT ["/knowledge-sidecar"]
CMD ["serve"]
