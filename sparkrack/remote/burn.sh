# The burn gate's sampler (sparkrack/safety/burn.py): argv INTERVAL RECORD FIELDS WANT RUNS
# BUSY_PCT LOAD...
interval=$1; record=$2; fields=$3; want=$4; runs=$5; busy_pct=$6; shift 6
mkdir -p "${record%/*}" || exit 3
cat /proc/sys/kernel/random/boot_id
nl='
'
# the GPU's maximum SM clock: a cap at or above it is no cap a burn can prove (capjudge)
max=$(nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits 2>&1)
printf 'M %s\n' "${max%%"$nl"*}"
log=$(mktemp) || exit 3
busy=0; run=0; pid=
whole=${interval%%.*}; tenths=${interval#"$whole"}; tenths=$(printf '%.1s' "${tenths#.}0")
ticks=$((${whole:-0} * 10 + tenths)); [ "$ticks" -ge 1 ] || ticks=1  # $interval in 0.1 s
# Ctrl-C on the operator's side closes the SSH channel: the next sample meets a closed
# pipe (SIGPIPE). The load must not outlive the check.
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null; fi; rm -f "$log"; exit 130' HUP INT TERM PIPE
while :; do
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    line=$(nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits 2>&1)
    line=${line%%"$nl"*}  # the first line (an error may have more): no pipe, no head
    printf 'S %s %s\n' "$(date +%s.%N)" "$line"
    util=${line##*, }
    case $util in ''|*[!0-9]*) ;; *) [ "$util" -ge "$busy_pct" ] && busy=$((busy + 1)) ;; esac
    # the next sample after $interval, or at once when the load ends (checked every 0.1 s)
    tick=0
    while [ "$tick" -lt "$ticks" ] && kill -0 "$pid" 2>/dev/null; do
      sleep 0.1; tick=$((tick + 1))
    done
  done
  wait "$pid"; rc=$?
  run=$((run + 1))
  if [ "$rc" -ne 0 ] || [ "$busy" -ge "$want" ] || [ "$run" -ge "$runs" ]; then break; fi
done
printf 'RC %d\n' "$rc"
tail -c 400 "$log" | sed 's/^/L /'
rm -f "$log"
