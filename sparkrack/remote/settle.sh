# Wait until a guard argv exits 0 (sparkrack/provision/modules/command.py `settle`):
# settle SECONDS GUARD...; exit 1, saying so, when it did not hold within SECONDS.
deadline=$(( $(date +%s) + $1 )); shift
until "$@" >/dev/null 2>&1 </dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "still not in force after the wait; the guard: $*" | cut -c1-200
    exit 1
  fi
  sleep 0.2
done
