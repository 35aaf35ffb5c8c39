#!/usr/bin/env bash
# Installs what the build needs beyond the Rust toolchain. Idempotent; quick when all is there.
#  - libclang-dev: rusqlite's `session` feature (state-update capture with SQLite's session
#    extension) generates its bindings with bindgen, which loads libclang at build time.
set -euo pipefail
need=()
if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' && ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1; then
  need+=(libclang-dev)
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install the Rust toolchain (rustup) first" >&2; exit 1; }
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
fi
