#!/usr/bin/env bash
# Regenerate docs/tui-capture-80x24.txt and docs/tui-capture-200x50.txt (docs/tui.md,
# "Checked by hand"): the demo cluster of top_demo.py, `mooncake top` in tmux at 80x24 and
# 200x50 (a tmux server of its own), every screen, the explain modal, filter while paused,
# resume, and store-b killed with SIGKILL turning unreachable.
#
#     bash tests/functional/top/top_captures.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
work="$(mktemp -d)"
mkfifo "$work/stdin"
python3 tests/functional/top/top_demo.py <"$work/stdin" >"$work/demo.out" 2>"$work/demo.err" &
demo=$!
exec 3>"$work/stdin" # the demo runs until its stdin closes
T="tmux -L mooncake-top-captures"
cleanup() {
  $T kill-server 2>/dev/null || true
  exec 3>&-
  wait "$demo" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 120); do grep -q "^mooncake top" "$work/demo.out" && break; sleep 0.5; done
cmd="$(grep -m1 "^mooncake top" "$work/demo.out" | sed "s|^mooncake |$(command -v python3) -m mooncake_cli |")"
for size in 80x24 200x50; do
  $T new-session -d -s "s$size" -x "${size%x*}" -y "${size#*x}" "env PYTHONPATH=$PYTHONPATH $cmd"
done
sleep 8 # a few polls: rates and sparklines have history

cap() { # cap SIZE TITLE: append a capture of session SIZE under a title line
  { echo "===== $2 ====="; $T capture-pane -p -t "s$1"; } >>"$work/cap-$1.txt"
}
keys() { $T send-keys -t "s$1" "${@:2}"; sleep 2; }

for size in 80x24 200x50; do
  for screen in 1 2 3 4; do
    keys "$size" "$screen"
    cap "$size" "screen $screen (tmux $size, $(date -u +%H:%M:%SZ))"
  done
done
keys 80x24 3
keys 80x24 Enter
cap 80x24 "screen 3, Enter on the selected decision: audit explain (tmux 80x24)"
keys 80x24 Escape
keys 80x24 4
keys 80x24 p
keys 80x24 / ; keys 80x24 -l store ; keys 80x24 Enter
cap 80x24 "screen 4: 'p' (pause), then '/', 'store', Enter (filter) (tmux 80x24)"
keys 80x24 p
cap 80x24 "screen 4 after 'p' again (resumed)"
victim="$(ps -o pid=,args= --ppid "$demo" | awk '/store node/ && /--name store-b/ {print $1; exit}')"
kill -KILL "$victim"
sleep 6
cap 80x24 "screen 4, filter 'store', resumed, after store-b was killed with SIGKILL (tmux 80x24)"
cap 200x50 "screen 4 after store-b was killed with SIGKILL (tmux 200x50)"
for size in 80x24 200x50; do cp "$work/cap-$size.txt" "docs/tui-capture-$size.txt"; done
echo "wrote docs/tui-capture-80x24.txt docs/tui-capture-200x50.txt"
