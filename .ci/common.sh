# Shared by .ci/tpu_path and .ci/colab_runtime (sourced): a clone of the checkout with the working
# tree's uncommitted changes, and step timing. The caller sets NAME (the job's name in headers).

STEPS=()
started=$SECONDS
step() {  # step TITLE: print a header, remember when the previous step ended
  finish_step
  STEP_NAME=$1 STEP_START=$SECONDS
  echo
  echo "=== $NAME: $1"
}
finish_step() {
  if [[ -n "${STEP_NAME:-}" ]]; then STEPS+=("$(printf '%5ds  %s' $((SECONDS - STEP_START)) "$STEP_NAME")"); fi
  STEP_NAME=
}
report() {
  finish_step
  echo
  echo "=== $NAME: step times"
  printf '%s\n' "${STEPS[@]}"
  printf '%5ds  total\n' $((SECONDS - started))
}

clone_checkout() {  # clone_checkout CHECKOUT CLONE: git clone plus uncommitted changes, so this tests what you see
  local checkout=$1 clone=$2 changed deleted
  git clone --quiet "$checkout" "$clone"
  echo "commit $(git -C "$clone" rev-parse --short HEAD)"
  changed=$( (git -C "$checkout" diff --name-only --diff-filter=d HEAD; git -C "$checkout" ls-files -o --exclude-standard) | sort -u)
  deleted=$(git -C "$checkout" diff --name-only --diff-filter=D HEAD)
  if [[ -n "$changed$deleted" ]]; then
    echo "plus the working tree's uncommitted changes:" $changed ${deleted:+(deleted: $deleted)}
    [[ -z "$changed" ]] || (cd "$checkout" && printf '%s\n' "$changed" | tar -cf - -T -) | tar -C "$clone" -xf -
    [[ -z "$deleted" ]] || (cd "$clone" && printf '%s\n' "$deleted" | xargs rm -f)
  fi
}
