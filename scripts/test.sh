#!/usr/bin/env bash
# Sets up everything the tests need, then runs the whole test suite (lint, unit, property,
# CLI and real-mount tests). GPU tests are ignored (shown as skipped) on hosts without a GPU; on the GPU
# host run them with `cargo nextest run --run-ignored all` (or a test binary with --include-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$HOME/.cargo/bin:$PATH"
# A one-off build (CI's clean clone) keeps no incremental state: it is never reused, and on disk it
# is as large as the build itself.
[ -n "${CI:-}" ] && export CARGO_INCREMENTAL=0
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
if cargo nextest --version >/dev/null 2>&1; then
  # (No doc tests exist; nextest's summary is the closing line CI reads.)
  cargo nextest run --workspace --no-fail-fast
else
  cargo test --workspace --no-fail-fast
fi
