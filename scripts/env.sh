# Sourced by the scripts: run programs on the librdkafka 2.16 runtime that install-deps unpacked
# (Debian's 2.0.2, which the binaries link against, cannot talk to current brokers).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export LD_LIBRARY_PATH="$root/.deps/librdkafka${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TANSU_BIN="${TANSU_BIN:-$root/.deps/bin/tansu}"
if [ -d /opt/swift/usr/bin ] && ! command -v swift >/dev/null 2>&1; then
  export PATH="/opt/swift/usr/bin:$PATH"
fi
