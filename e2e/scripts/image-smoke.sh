#!/usr/bin/env bash
# image-smoke.sh [ARCHIVE]
# The image as its users run it (`make image-smoke`; docs/operations.md, "The image"):
#   1. its layout and config, read with skopeo and umoci: user 65532, no entrypoint, the default
#      command, one binary under /work, /usr/local/bin/work-agent and /usr/local/bin/maestro,
#      the CA bundle; then the unpacked rootfs run as uid 65532 (chroot, the image's own
#      libraries): `--version` under each name and `maestro agent --help`;
#   2. `podman load`, then e2e/tests/deploy/image.rs (its ignored tests): the container started with the
#      klusterlet's `/work agent ...` against the hub and spoke control planes, and with Maestro's
#      chart's `/usr/local/bin/maestro agent ...` against a private mosquitto, read-only root,
#      all capabilities dropped; each applies a work and answers /healthz on :8443.
# ARCHIVE defaults to the one `make image` wrote (target/image/work-agent.oci.tar).
# Needs the control planes (run it through with-cluster.sh, as `make image-smoke` does), root
# (podman, chroot) and Debian's podman, skopeo, umoci (installed when missing).
#
# Where podman cannot run a container as is, the script says which command failed with which
# error, and retries in a private mount namespace without the cgroup v2 hierarchy (crun refuses
# "hybrid" cgroups with controllers on v2) and with lowered rlimits; what it needed is printed
# and written to $RUN_ROOT/image/sandbox.txt.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
OUT=$RUN_ROOT/image
log() { printf '[image-smoke] %s\n' "$*" >&2; }
die() { log "FAILED: $*"; exit 1; }
cd "$ROOT"

archive=$(readlink -f "${1:-$ROOT/target/image/work-agent.oci.tar}")
[ -f "$archive" ] || die "no image archive at $archive: run 'make image' first"
[ "$(id -u)" = 0 ] || die "run as root (podman and chroot)"
mkdir -p "$OUT"
# Set on the script's own re-runs (after a podman refusal): the checks of part 1 are done.
retry=${IMAGE_SMOKE_RETRY:-}
[ -n "$retry" ] || rm -f "$OUT/sandbox.txt"

missing=()
for tool in podman skopeo umoci; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi
e2e/scripts/mosquitto.sh install

# --- 1. layout, config, and the rootfs run as the non-root user ---
if [ -z "$retry" ]; then
  log "layout and config of $archive ($(stat -c %s "$archive") bytes)"
  config=$(skopeo inspect --config "oci-archive:$archive")
  python3 - "$config" <<'PY' || die "image config"
import json, sys
c = json.loads(sys.argv[1])["config"]
checks = {
    "User": (c.get("User"), "65532:65532"),
    "Entrypoint": (c.get("Entrypoint"), None),
    "Cmd": (c.get("Cmd"), ["/usr/local/bin/work-agent", "run"]),
    "ExposedPorts": (sorted(c.get("ExposedPorts", {})), ["8080/tcp", "8443/tcp"]),
}
bad = {k: v for k, (v, want) in checks.items() if v != want}
for k, (v, want) in checks.items():
    print(f"[image-smoke]   {k}: {v!r}" + ("" if v == want else f"  (want {want!r})"), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
  unpacked="$OUT/unpacked"
  rm -rf "$unpacked" "$OUT/layout"
  mkdir -p "$OUT/layout"
  tar -xf "$archive" -C "$OUT/layout"
  [ -f "$OUT/layout/index.json" ] && [ -d "$OUT/layout/blobs/sha256" ] || die "not an OCI layout (index.json, blobs/)"
  ref=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$OUT/layout/index.json")
  umoci unpack --image "$OUT/layout:$ref" "$unpacked" >/dev/null
  rootfs="$unpacked/rootfs"
  inode() { stat -c %i "$rootfs$1"; }
  [ "$(inode /work)" = "$(inode /usr/local/bin/work-agent)" ] && [ "$(inode /work)" = "$(inode /usr/local/bin/maestro)" ] ||
    die "/work, /usr/local/bin/work-agent and /usr/local/bin/maestro are not one file"
  [ -s "$rootfs/etc/ssl/certs/ca-certificates.crt" ] || die "no CA bundle"
  grep -q '^nonroot:x:65532:65532:' "$rootfs/etc/passwd" || die "no user 65532 in /etc/passwd"
  writable=$(find "$rootfs" -xdev -perm -o+w ! -type l ! -path "$rootfs/tmp" | sed "s|^$rootfs||")
  [ -z "$writable" ] || die "world-writable paths besides /tmp: $writable"
  log "  files: $(find "$rootfs" -type f | wc -l), rootfs $(du -sb "$rootfs" | cut -f1) bytes; /work = work-agent = maestro"
  for name in /work /usr/local/bin/work-agent /usr/local/bin/maestro; do
    v=$(chroot --userspec=65532:65532 "$rootfs" "$name" --version) || die "chroot --userspec=65532:65532 $rootfs $name --version"
    log "  uid 65532: $name --version -> $v"
  done
  chroot --userspec=65532:65532 "$rootfs" /usr/local/bin/maestro agent --help | grep -q -- '--consumer-name' ||
    die "maestro agent --help does not take Maestro's chart flags"
  log "  uid 65532: maestro agent --help lists --consumer-name"
fi

# --- 2. podman: load, a first container, then the consumers' command lines ---
loaded=$(podman load -i "$archive" 2>&1) || die "podman load -i $archive: $loaded"
image=$(printf '%s\n' "$loaded" | sed -n 's/^Loaded image: *//p' | tail -1)
[ -n "$image" ] || die "podman load printed no image name: $loaded"
log "loaded $image ($(podman image inspect --format '{{.Size}}' "$image") bytes in podman's store)"

extra=${WORK_AGENT_PODMAN_ARGS:-}
probe() { podman run --rm --read-only $extra "$image" /work --version 2>&1; }
if ! out=$(probe); then
  log "podman run --rm --read-only $extra $image /work --version: $out"
  printf 'podman run --rm --read-only %s %s /work --version\n  %s\n' "$extra" "$image" "$out" >>"$OUT/sandbox.txt"
  case "$out" in
    *"setrlimit"*)
      # crun sets the rlimits podman passes (the host's), which this machine refuses; lower ones
      # it accepts.
      export WORK_AGENT_PODMAN_ARGS="$extra --ulimit nofile=16384:16384 --ulimit nproc=4096:4096"
      log "retrying with $WORK_AGENT_PODMAN_ARGS"
      export IMAGE_SMOKE_RETRY=1
      exec "$0" "$archive"
      ;;
    *"cgroups in hybrid mode"*)
      [ -z "${IMAGE_SMOKE_INNER:-}" ] || die "still hybrid cgroups in the private mount namespace"
      log "retrying in a private mount namespace without /sys/fs/cgroup/unified (cgroup v2)"
      export IMAGE_SMOKE_INNER=1 IMAGE_SMOKE_RETRY=1
      exec unshare --mount --propagation private bash -c 'umount /sys/fs/cgroup/unified && exec "$0" "$1"' "$0" "$archive"
      ;;
    *) die "podman cannot run the image here" ;;
  esac
fi
log "podman run ... /work --version -> $out"
[ ! -s "$OUT/sandbox.txt" ] || { log "what this machine needed:"; cat "$OUT/sandbox.txt" >&2; log "  (then: WORK_AGENT_PODMAN_ARGS='${extra}'${IMAGE_SMOKE_INNER:+, private mount namespace without cgroup v2})"; }

export WORK_AGENT_IMAGE=$image WORK_AGENT_PODMAN_ARGS=$extra
t=$SECONDS
e2e/scripts/run-integration.sh --test deploy -- --ignored --test-threads=1 image::
log "image smoke tests passed in $((SECONDS - t))s"
