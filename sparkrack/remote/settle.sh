# Wait until a guard argv exits 0 (sparkrack/provision/modules/command.py `settle`), and
# still does a second later: a daemon may pass the guard before it has caught up (after
# `netplan apply`, networkd deletes and re-adds an address, and the RoCE GID it carries
# goes a moment later, after the check saw the old one); settle SECONDS GUARD...; exit 1,
# saying so, when it did not hold within SECONDS.
deadline=$(( $(date +%s) + $1 )); shift
held=
while :; do
  if "$@" >/dev/null 2>&1 </dev/null; then
    [ -n "$held" ] && exit 0
    held=1; sleep 1; continue
  fi
  held=
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "still not in force after the wait; the guard: $*" | cut -c1-200
    exit 1
  fi
  sleep 0.2
done
