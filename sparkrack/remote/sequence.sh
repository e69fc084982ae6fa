# A node's commands in order (sparkrack/provision/apply.py): argv (COUNT ARGV...)...;
# the first that fails is an @@<position> failed section (sparkrack/facts/sections.py)
i=0
while [ $# -gt 0 ]; do
  c=$1; shift
  out=$("${@:1:c}" 2>&1 </dev/null)
  rc=$?
  if [ "$rc" -ne 0 ]; then
    printf '@@%d failed\nrc %d\n %s\n' "$i" "$rc" "${out//$'\n'/$'\n' }"
    exit 1
  fi
  shift "$c"
  i=$((i+1))
done
