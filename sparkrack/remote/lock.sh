# The rack lock's node side (sparkrack/oplock/remote.py): argv OP DIR ARGS...; the audit
# lines (and take's holder JSON first) on stdin, never in argv (`ps` shows argv to everyone)
op=$1; d=$2; shift 2
umask 077
f=$d/lock.json
log=$d/audit.jsonl
sha() { s=$(printf '%s' "$1" | sha256sum) && printf '%s' "${s%% *}"; }
append() {  # each line of stdin, chained: {"prev":"SHA-256 of the line before it",...
  prev=$(sha "$(tail -n 1 "$log" 2>/dev/null)") || { echo "ERROR sha256sum failed"; return 1; }
  while IFS= read -r line || [ -n "$line" ]; do
    [ -n "$line" ] || continue
    case $line in '{"'*) ;; *) echo "ERROR not an audit line (a JSON object)"; return 1 ;; esac
    line="{\"prev\":\"$prev\",${line#?}"
    printf '%s\n' "$line" >>"$log" || { echo "ERROR cannot append to $log"; return 1; }
    prev=$(sha "$line")
  done
}
holder() { [ -f "$f" ] && printf '%s %s %s\n' "$1" "$(( now - $(stat -c %Y "$f") ))" "$(cat "$f")"; }
ours() { [ -f "$f" ] && grep -qF "\"token\":\"$1\"" "$f"; }
mkdir -p "$d" && chmod 700 "$d" || { echo "ERROR cannot create $d"; exit 5; }
for old in "$f" "$log" "$d/lock.guard" "$d/lock.broken.json"; do  # made 0644 by older versions
  [ -f "$old" ] && chmod 600 "$old"
done
case $op in
  show|log) ;;
  *) command -v flock >/dev/null || { echo "ERROR flock(1) is missing on this node (util-linux)"; exit 5; }
     exec 9>>"$d/lock.guard" || { echo "ERROR cannot open $d/lock.guard"; exit 5; }
     flock -w 10 9 || { echo "ERROR $d/lock.guard stayed locked for 10 s"; exit 5; } ;;
esac
now=$(date +%s)
echo "NOW $now"
case $op in
  take)
    if [ -f "$f" ] && ! ours "$1"; then
      if [ $(( now - $(stat -c %Y "$f") )) -le "$2" ]; then holder HOLDER; echo HELD; exit 0; fi
      holder STALE
    fi
    IFS= read -r json || { echo "ERROR no holder on stdin"; exit 5; }
    tmp=$d/.lock.$1
    printf '{"since":%s,%s\n' "$now" "${json#?}" >"$tmp" && mv -f "$tmp" "$f" || { echo "ERROR cannot write $f"; exit 5; }
    append || exit 5
    echo TAKEN ;;
  refresh)
    if ours "$1"; then touch -d "@$(( now + $2 ))" "$f" && echo OK || { echo "ERROR cannot touch $f"; exit 5; }
    else holder HOLDER; echo LOST; fi ;;
  release)
    if ours "$1"; then rm -f "$f" && echo RELEASED; else holder HOLDER; echo NOTOURS; fi
    append || exit 5 ;;
  break)
    if [ ! -f "$f" ]; then echo FREE
    elif [ -n "$1" ] && ! ours "$1"; then holder HOLDER; echo MISMATCH; exit 0
    else holder HOLDER; mv -f "$f" "$d/lock.broken.json" && echo BROKEN || { echo "ERROR cannot move $f"; exit 5; }
    fi
    append || exit 5 ;;
  append) append || exit 5; echo APPENDED ;;
  show) if holder HOLDER; then echo HELD; else echo FREE; fi ;;
  log) if holder HOLDER; then echo HELD; else echo FREE; fi; echo AUDIT; cat "$log" 2>/dev/null ;;
  *) echo "ERROR unknown operation $op"; exit 5 ;;
esac
