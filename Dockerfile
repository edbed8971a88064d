# syntax=docker/dockerfile:1
# Multi-stage build: a static binary on a distroless, non-root base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
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
