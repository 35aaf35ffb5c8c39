# Sourced by the scripts that record a real run of `ensemble bench` on PostgreSQL with `perf`
# (profile-node.sh, idle-periods.sh), once they have set `script` (their name, for errors) and
# `bin` (the ensemble binary) and moved to the repository: installs perf (linux-perf) if it is
# missing, builds the release binary if `bin` is missing, starts the databases, and makes `work`,
# a directory removed when the caller exits, holding `loopback.toml`, a topology of one site
# without delay; `await_node_ready` waits for the caller's run to have its node ready. A
# caller that exits early, its run (`bench`, the pid) still going, stops it, so that the run's
# clean-up drops its databases.
if ! command -v perf >/dev/null || ! perf --version >/dev/null 2>&1; then
  echo "$script: installing linux-perf" >&2
  sudo_=""
  [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq linux-perf >/dev/null
fi
[ -x "$bin" ] || { scripts/setup.sh; cargo build --release --locked -p ensemble; }
scripts/start-databases.sh >/dev/null
work=$(mktemp -d)
trap 'if [ -n "${bench:-}" ] && kill -0 "$bench" 2>/dev/null; then kill "$bench"; wait "$bench" 2>/dev/null; fi; rm -rf "$work"' EXIT
cat > "$work/loopback.toml" <<'TOML'
name = "loopback"
sites = ["dc"]
one_way_ms = [[0.0]]
TOML

# Waits (up to two minutes) until the run `bench`, writing to `$work/bench.txt`, says that its
# node is ready, which is after the node has loaded its database and before the clients start;
# says why and exits otherwise (the trap above then stops the run).
await_node_ready() {
  for _ in $(seq 1 1200); do
    grep -q "ready at" "$work/bench.txt" && return 0
    kill -0 "$bench" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/bench.txt" >&2
  echo "$script: the node did not start" >&2
  exit 1
}
