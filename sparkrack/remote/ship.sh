# Unpack the watchdog's lib/ from a tar.gz on stdin (sparkrack/watchdog/ship.py): argv DIR PYTHON
set -e
cd /
d=$1; py=$2
umask 022
mkdir -p "$d"
rm -rf "$d/lib.new" "$d/lib.old"
mkdir "$d/lib.new"
tar -xzf - -C "$d/lib.new" --no-same-owner
"$py" -m compileall -q -j 0 -d "$d/lib" "$d/lib.new" >/dev/null 2>&1 || true
if [ -d "$d/lib" ]; then mv "$d/lib" "$d/lib.old"; fi
mv "$d/lib.new" "$d/lib"
rm -rf "$d/lib.old"
