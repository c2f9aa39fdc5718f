#!/usr/bin/env bash
# build-image.sh: the agent's OCI image, FROM scratch, with Debian's tools (umoci, skopeo) and no
# registry or container engine: a rootfs is assembled here and packed into an OCI archive
# (oci-archive: a tar of an OCI layout, `index.json` and `blobs/`), which `podman load`,
# `skopeo copy oci-archive:... docker://...` or a registry push take as is.
#
# The image holds:
#   /work, /usr/local/bin/work-agent, /usr/local/bin/maestro
#                       the release binary, one file under three names (hard links in the layer):
#                       the klusterlet runs `/work agent ...`, Maestro's agent chart
#                       `/usr/local/bin/maestro agent ...`
#   /lib/x86_64-linux-gnu/..., /lib64/ld-linux-x86-64.so.2
#                       the C libraries the binary links (libc, libm, libgcc_s and the loader),
#                       copied from this Debian machine's packages
#   /etc/ssl/certs/ca-certificates.crt
#                       Debian's CA bundle (TLS to brokers and API servers that have no CA file)
#   /etc/passwd, /etc/group, /etc/nsswitch.conf
#                       the non-root user 65532 ("nonroot", as distroless), host lookups
# Config: user 65532:65532, no entrypoint (the klusterlet passes the whole command), default
# command `/usr/local/bin/work-agent run`, ports 8080 (metrics, probes) and 8443 (probes over
# HTTPS). Nothing in the image is writable or needs to be: it runs with a read-only root.
#
# Usage: scripts/build-image.sh [--binary PATH] [--out DIR] [--tag TAG]
#   --binary  a release binary already built (default: `cargo build --release --locked -p work-agent`)
#   --out     where the layout, rootfs and archive go (default: target/image)
#   --tag     the image reference in the archive (default: localhost/work-agent:<version>-<commit>)
# The last line printed is the absolute path of the OCI archive.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
log() { printf '[image] %s\n' "$*" >&2; }
fail() { log "$*"; exit 1; }

binary="" out="$ROOT/target/image" tag=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) fail "unknown argument: $1" ;;
  esac
done

# The tools come from Debian's packages; as root the script installs what is missing.
missing=()
for tool in umoci skopeo; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ "${#missing[@]}" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || fail "missing: ${missing[*]}; run as root or: apt-get install -y ${missing[*]}"
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi

t0=$SECONDS
if [ -z "$binary" ]; then
  log "cargo build --release --locked -p work-agent"
  cargo build --release --locked -p work-agent
  binary="$ROOT/target/release/work-agent"
fi
[ -x "$binary" ] || fail "no executable at $binary"
binary=$(readlink -f "$binary")
t_build=$((SECONDS - t0))

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$tag" ] || tag="localhost/work-agent:${version}-${commit}"

t1=$SECONDS
layout="$out/oci" bundle="$out/bundle" archive="$out/work-agent.oci.tar"
rm -rf "$layout" "$bundle" "$archive"
mkdir -p "$out"
umoci init --layout "$layout"
umoci new --image "$layout:build"
# Rootless: the files are owned by whoever runs this, recorded as root (0:0) in the layer.
umoci unpack --rootless --image "$layout:build" "$bundle" >/dev/null
rootfs="$bundle/rootfs"

install -d -m 0755 "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs"
install -m 0755 "$binary" "$rootfs/work"
ln "$rootfs/work" "$rootfs/usr/local/bin/work-agent"
ln "$rootfs/work" "$rootfs/usr/local/bin/maestro"

# Every library the binary loads, at the path the loader looks for it (the loader's path is
# compiled into the binary; the others follow from the loader's default directories).
libs=$(ldd "$binary" | awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
[ -n "$libs" ] || fail "ldd found no libraries for $binary (a static binary needs none: then drop this check)"
for lib in $libs; do
  install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
done

install -m 0644 /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group" "$rootfs/etc/nsswitch.conf"
# The only directories a process may expect; empty (mount an emptyDir on /tmp if ever needed).
install -d -m 1777 "$rootfs/tmp"
install -d -m 0755 "$rootfs/home/nonroot"

# Every file dated at the commit, so the same binary gives the same layer.
created=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
find "$rootfs" -exec touch -h -d "$created" {} +
umoci repack --history.created "$created" --history.created_by "scripts/build-image.sh" \
  --image "$layout:build" "$bundle"
umoci config --image "$layout:build" \
  --os linux --architecture amd64 \
  --created "$created" --author "work-agent" \
  --config.user 65532:65532 \
  --config.workingdir / \
  --config.env PATH=/usr/local/bin:/usr/bin:/bin \
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --config.exposedports 8080/tcp --config.exposedports 8443/tcp \
  --config.cmd /usr/local/bin/work-agent --config.cmd run \
  --config.label org.opencontainers.image.title=work-agent \
  --config.label org.opencontainers.image.version="$version" \
  --config.label org.opencontainers.image.revision="$commit" \
  --no-history
umoci gc --layout "$layout"
skopeo copy --quiet "oci:$layout:build" "oci-archive:$archive:$tag"
t_pack=$((SECONDS - t1))

archive=$(readlink -f "$archive")
size=$(stat -c %s "$archive")
layer=$(skopeo inspect --raw "oci-archive:$archive" | python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
unpacked=$(du -sb --apparent-size "$rootfs" | cut -f1)
log "image $tag: archive $size bytes, layer $layer bytes compressed, rootfs $unpacked bytes unpacked"
log "binary: $binary ($(stat -c %s "$binary") bytes); build ${t_build}s, image ${t_pack}s"
echo "$archive"
