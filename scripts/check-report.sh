#!/usr/bin/env bash
# Opens an ft HTML run report (core/src/observe/report_template.html, filled
# in) in headless Chromium and checks that its script ran cleanly: the body
# has data-ft-status="ok", <pre id="ft-errors"> is empty, and there is at
# least one <svg class="chart"> and every one of them has data-drawn="1".
#
#   scripts/check-report.sh REPORT.html                 check only
#   scripts/check-report.sh REPORT.html SHOT.png        and save a screenshot
#   CHROMIUM=/path/to/chrome scripts/check-report.sh ...   another browser
#
# Exit 0 passed (prints how many charts were drawn), 1 a check failed (one
# line saying why), 2 usage or a missing file, 77 (one SKIP line) when
# chromium is not installed.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: scripts/check-report.sh REPORT.html [SCREENSHOT.png]" >&2
  exit 2
fi
report="$1"
shot="${2:-}"
[[ -f "$report" ]] || { echo "check-report: no such file: $report" >&2; exit 2; }

chromium="${CHROMIUM:-$(command -v chromium || true)}"
if [[ -z "$chromium" || ! -x "$chromium" ]]; then
  echo "SKIP: chromium not installed"
  exit 77
fi
python=/usr/bin/python3
[[ -x "$python" ]] || python="$(command -v python3)"

work="$(mktemp -d "${TMPDIR:-/tmp}/ft-check-report.XXXXXX")"
trap 'rm -rf "$work"' EXIT
url="file://$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"

browse() {  # browse PROFILE_DIR EXTRA_FLAGS... : headless Chromium on the report
  local profile="$1"
  shift
  timeout 120 "$chromium" --headless --no-sandbox --disable-gpu --no-first-run --no-default-browser-check \
    --disable-extensions --disable-background-networking --hide-scrollbars --mute-audio \
    --user-data-dir="$profile" --virtual-time-budget=5000 "$@" "$url"
}

if ! browse "$work/profile-dom" --dump-dom >"$work/dom.html" 2>"$work/dom.err"; then
  echo "FAIL: chromium --dump-dom failed: $(grep -v '^\s*$' "$work/dom.err" | tail -1)"
  exit 1
fi

rc=0
"$python" - "$work/dom.html" <<'EOF' || rc=$?
import sys
from html.parser import HTMLParser


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Dom(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.status = None
        self.body_seen = False
        self.errors = []
        self.in_errors = 0  # depth inside <pre id="ft-errors">
        self.charts = []  # data-drawn of each svg.chart

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body_seen = True
            self.status = a.get("data-ft-status")
        if self.in_errors:
            self.in_errors += tag not in VOID
        elif tag == "pre" and a.get("id") == "ft-errors":
            self.in_errors = 1
        if tag == "svg" and "chart" in (a.get("class") or "").split():
            self.charts.append(a.get("data-drawn"))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.in_errors and tag not in VOID:
            self.in_errors -= 1

    def handle_endtag(self, tag):
        if self.in_errors:
            self.in_errors -= 1

    def handle_data(self, data):
        if self.in_errors:
            self.errors.append(data)


dom = Dom()
dom.feed(open(sys.argv[1], encoding="utf-8", errors="replace").read())
dom.close()
errors = "".join(dom.errors).strip()


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


if not dom.body_seen:
    fail("the dumped DOM has no <body> (did the page load?)")
if errors:
    fail("#ft-errors: " + errors.splitlines()[0][:300])
if dom.status != "ok":
    fail('body data-ft-status is %s, expected "ok"' % ('"%s"' % dom.status if dom.status is not None else "missing"))
if not dom.charts:
    fail("no svg.chart in the report")
undrawn = sum(1 for d in dom.charts if d != "1")
if undrawn:
    fail("%d of %d svg.chart elements are not drawn (data-drawn != 1)" % (undrawn, len(dom.charts)))
print("ok: %d charts drawn" % len(dom.charts))
EOF

# The screenshot is taken even when a check failed: it shows what went wrong.
if [[ -n "$shot" ]]; then
  case "$shot" in /*) shot_abs="$shot" ;; *) shot_abs="$PWD/$shot" ;; esac
  if ! browse "$work/profile-shot" --screenshot="$shot_abs" --window-size=1400,3000 >"$work/shot.out" 2>&1 \
      || [[ ! -s "$shot_abs" ]]; then
    echo "FAIL: chromium could not write the screenshot $shot: $(grep -v '^\s*$' "$work/shot.out" | tail -1)"
    exit 1
  fi
  echo "screenshot: $shot"
fi
exit "$rc"
