# A small static image of the work agent: a musl build copied onto distroless/static, run as a
# non-root user. Build from the repository root:
#   docker build -t work-agent:dev .
# For teams that build with Docker and registries. The project's own image is `make image`
# (FROM scratch with Debian's umoci and skopeo, no registry), which `make image-smoke` runs; this
# file is not built here. See docs/operations.md.

FROM docker.io/library/rust:1.89-alpine AS build
# ring (rustls' crypto) compiles C and assembly.
RUN apk add --no-cache build-base
WORKDIR /src
COPY . .
# Alpine's host target is x86_64/aarch64-unknown-linux-musl: the binary is static.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p work-agent \
    && install -D -m 0755 target/release/work-agent /out/work-agent

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/work-agent /usr/local/bin/work-agent
# Upstream's path: the OCM klusterlet operator runs the work image with the arguments
# `/work agent --spoke-cluster-name=... ...` and no command, so the image has no ENTRYPOINT and
# the binary is also `/work` (a copy: distroless has no shell to make a link).
COPY --from=build /out/work-agent /work
# Maestro's agent chart runs `/usr/local/bin/maestro agent ...`: the same binary under that name.
COPY --from=build /out/work-agent /usr/local/bin/maestro
# distroless' nonroot user; matches runAsUser in deploy/base/deployment.yaml.
USER 65532:65532
# 8080: /metrics, /healthz, /readyz over HTTP; 8443: /healthz, /readyz over HTTPS (upstream's probes).
EXPOSE 8080 8443
CMD ["/usr/local/bin/work-agent", "run"]
