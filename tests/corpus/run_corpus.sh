#!/usr/bin/env bash
# The compatibility corpus: build every program here twice, with `nvcc -cudart shared` and with
# nvcc's default static runtime, run each natively and under cudaw with CUDAW_VMEM=remap and
# =translate (the static builds with cudaw preloaded, as `cudaw run` does), and print a Markdown
# table of outcomes. With CUDAW_CTL set, every run under cudaw is paused in the middle (at the
# program's first corpus_sync: cudaw-ctl checkpoint, then resume) before it finishes its work.
# Usage: run_corpus.sh <dir of cudaw's libcudart.so.N> <work dir> [program name filter]
# With CUDAW_CTL (cudaw-ctl's path) set, also texture_checkpoint.sh: a checkpoint from outside
# while a texture is alive, under both policies.
# Exit: 0 when every program passes natively, remap matches native, and translate passes with
# native's result or stops with an error cudaw explained (or the program declares a known limit
# of translate, "// Translate: known limit"); 1 otherwise; 77 without a GPU.
# Outcomes: pass; WRONG (the program's own check failed); "error: X" (a CUDA call failed with X);
# refused (a documented refusal the program expects, e.g. IPC); HANG (killed after the limit);
# crash; "differs" (passed, but its RESULT line is not native's); "not cudaw" (cudaw not loaded);
# ", not virtualised": cudaw declined to virtualise (translate with cuBLAS & co. loaded).
set -u
LIB=$(cd "$1" && pwd)
WORK=$(mkdir -p "$2" && cd "$2" && pwd)
FILTER=${3:-}
SRC=$(cd "$(dirname "$0")" && pwd)
ARCH=${CUDAW_CORPUS_ARCH:-90}
LIMIT=${CUDAW_CORPUS_TIMEOUT:-60}
mkdir -p "$WORK/bin" "$WORK/log"
rm -f "$WORK/details.txt"
command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 || {
  echo "skipped: no GPU"; exit 77; }

programs=()
for f in "$SRC"/c*.cu; do
  name=$(basename "$f" .cu)
  [ -n "$FILTER" ] && [[ "$name" != *$FILTER* ]] && continue
  programs+=("$name")
done
# Build in parallel; a program that does not build is reported as such.
printf '%s\n' "${programs[@]}" | xargs -P "$(nproc)" -I{} sh -c '
  flags=$(sed -n "s|^// Build: ||p" "$0/{}.cu")
  nvcc -cudart shared -arch=sm_$1 -O2 -o "$2/bin/{}" "$0/{}.cu" $flags > "$2/log/{}.build" 2>&1
  nvcc -arch=sm_$1 -O2 -o "$2/bin/{}.static" "$0/{}.cu" $flags > "$2/log/{}.static.build" 2>&1' \
  "$SRC" "$ARCH" "$WORK"

# run <name> <mode> [static]: sets outcome, note and paused.
run() {
  local name=$1 mode=$2 exe=$WORK/bin/$1${3:+.static} log="$WORK/log/$1${3:+.static}.$2" rc pid
  detail="" paused=""
  if [ ! -x "$exe" ]; then outcome="build failed"; note=""; return; fi
  if [ "$mode" = native ]; then
    timeout -k 5 "$LIMIT" "$exe" > "$log" 2>&1
    rc=$?
  else
    rm -f "$log".ld.* "$log.go"
    local preload=""
    [ -n "${3:-}" ] && preload=$(ls "$LIB"/libcudart.so.* | head -1)
    env LD_DEBUG=libs LD_DEBUG_OUTPUT="$log.ld" CUDAW_LOG=info CUDAW_VMEM=$mode \
      LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$preload" \
      ${CUDAW_CTL:+CORPUS_PAUSE_FILE="$log.go"} timeout -k 5 "$LIMIT" "$exe" > "$log" 2>&1 &
    pid=$!
    if [ -n "${CUDAW_CTL:-}" ]; then
      # The timeout's child is the program.
      local i=0 child=""
      while [ $i -lt 600 ] && kill -0 $pid 2>/dev/null && ! grep -q '^PAUSE_POINT' "$log"; do
        sleep 0.05; i=$((i + 1))
      done
      child=$(pgrep -P $pid | head -1)
      if grep -q '^PAUSE_POINT' "$log" && [ -n "$child" ]; then
        if "$CUDAW_CTL" checkpoint "$child" > "$log.pause" 2>&1 &&
           "$CUDAW_CTL" resume "$child" >> "$log.pause" 2>&1; then
          paused=", paused"
        elif [ "$mode" = translate ] && grep -q "texture object over cudaw memory" "$log.pause"; then
          paused=", pause refused: a live texture object (documented under translate)"
        else
          paused=", pause failed: $(tail -1 "$log.pause" | cut -c1-120)"
        fi
      fi
      touch "$log.go"
    fi
    wait $pid
    rc=$?
  fi
  note=$(grep -m1 -E "^cudaw\[[0-9]+\]: (warn|error):" "$log" | sed 's/^cudaw\[[0-9]*\]: //' | cut -c1-160)
  detail=$(grep -m1 -E "^(WRONG|ERROR)" "$log" | cut -c1-120)
  case $rc in
    0) outcome=pass ;;
    1) outcome=WRONG ;;
    2) outcome="error: $(grep -m1 -oE '^ERROR [A-Za-z_]+( status -?[0-9]+)?' "$log" | cut -c7-)" ;;
    3) outcome=refused ;;
    124|137) outcome=HANG ;;
    *) outcome="crash (exit $rc)" ;;
  esac
  if [ "$mode" != native ]; then
    if grep -q "allocations are not virtualised" "$log"; then
      outcome="$outcome, not virtualised"
    elif ! cat "$log".ld.* 2>/dev/null | grep -qE "calling init: $LIB/libcudart.so"; then
      outcome="not cudaw ($outcome)"
    fi
  fi
}

result_line() { grep -m1 '^RESULT' "$1" 2>/dev/null; }

bad=0
echo "| program | build | native | remap | translate | cudaw says (translate) |"
echo "| --- | --- | --- | --- | --- | --- |"
for name in "${programs[@]}"; do
 for build in shared static; do
  static=""; [ $build = static ] && static=1
  tag=$name${static:+.static}
  run "$name" native $static; native=$outcome; details="${detail:+native: $detail}"
  run "$name" remap $static; remap=$outcome; remap_paused=$paused; details+="${detail:+ remap: $detail}"
  run "$name" translate $static; translate=$outcome; translate_note=$note
  translate_paused=$paused
  details+="${detail:+ translate: $detail}"
  for mode in remap translate; do
    n=$(result_line "$WORK/log/$tag.native"); m=$(result_line "$WORK/log/$tag.$mode")
    if [ -n "$n" ] && [ "$n" != "$m" ] && [ "$(eval echo \$$mode)" = pass ]; then
      eval "$mode=differs"
    fi
  done
  echo "| ${name#c??_} | $build | $native | $remap$remap_paused | $translate$translate_paused | ${translate_note//|/\\|} |"
  [ -n "$details" ] && echo "$tag: $details" >> "$WORK/details.txt"
  # Native must pass (or refuse as documented); remap must match native; translate must pass,
  # or fail with an error that cudaw explained in its log; a pause that was tried must work.
  [ "$native" = pass ] || [ "$native" = refused ] || bad=1
  [ "$remap" = "$native" ] || { [ "$remap" = refused ] && [ "$native" = pass ]; } || bad=1
  case $translate in
    pass|refused|"pass, not virtualised") ;;
    error:*) [ -n "$translate_note" ] || grep -q "^// Translate: known limit" "$SRC/$name.cu" || bad=1 ;;
    *) bad=1 ;;
  esac
  case "$remap_paused$translate_paused" in *"pause failed"*) bad=1 ;; esac
 done
done
[ -f "$WORK/details.txt" ] && { echo; cat "$WORK/details.txt"; }
if [ -n "${CUDAW_CTL:-}" ] && [ -x "$WORK/bin/c02_texture_pitch2d" ]; then
  echo
  bash "$SRC/texture_checkpoint.sh" "$LIB" "$CUDAW_CTL" "$WORK/bin/c02_texture_pitch2d" "$WORK" || bad=1
fi
exit $bad
