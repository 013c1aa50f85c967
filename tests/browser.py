"""Open a page in headless Chromium, offline, and read back what the page did.

No driver library: a copy of the page gets two scripts — one first in <head> that records
console errors, uncaught exceptions and rejected promises, one at the end of <body> that
waits for the report's ``data-tk-rendered`` flag and writes a JSON verdict into
``<pre id="tk-check">`` — and ``chromium --dump-dom`` prints the DOM after the page ran.
Chromium's own console log (``--enable-logging=stderr``) is scanned too, for errors no
script sees (a failed resource load).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
         "--disable-component-update", "--disable-default-apps", "--hide-scrollbars")

HOOK = """<script>
window.__tkErrors=[];
(function(){var e=console.error;console.error=function(){window.__tkErrors.push('console.error: '+Array.prototype.join.call(arguments,' '));return e.apply(console,arguments);};})();
window.addEventListener('error',function(ev){window.__tkErrors.push('error: '+(ev.message||ev.type)+' '+(ev.filename||'')+':'+(ev.lineno||''));},true);
window.addEventListener('unhandledrejection',function(ev){window.__tkErrors.push('unhandledrejection: '+ev.reason);});
</script>"""

CHECK = """<script>
(function(){
  function pts(t){var n=0;['x','y','z'].forEach(function(k){var v=t[k];if(v&&v.length>n){n=v.length;}});return n;}
  function verdict(){
    var plots=[];
    document.querySelectorAll('div.tk-plot').forEach(function(d){
      var data=d.data||[];
      plots.push({id:d.id,title:d.dataset.title,rendered:d.classList.contains('js-plotly-plot'),
        svg:d.querySelectorAll('svg.main-svg').length,canvas:d.querySelectorAll('canvas').length,
        traces:data.length,points:data.map(pts),
        width:d.getBoundingClientRect().width,height:d.getBoundingClientRect().height,
        customdata:data.map(function(t){return {name:t.name||'',x:t.x||null,customdata:t.customdata||null};})});
    });
    var res=performance.getEntriesByType('resource').map(function(e){return e.name;});
    var missing=[];document.querySelectorAll('[data-missing]').forEach(function(m){missing.push({key:m.dataset.missing,text:m.textContent});});
    var out={rendered:document.body.dataset.tkRendered||null,errors:window.__tkErrors,plots:plots,resources:res,missing:missing};
    var pre=document.createElement('pre');pre.id='tk-check';pre.textContent=JSON.stringify(out);document.body.appendChild(pre);
  }
  var tries=0;
  function wait(){if(document.body.dataset.tkRendered||tries++>200){verdict();}else{setTimeout(wait,50);}}
  window.addEventListener('load',function(){setTimeout(wait,0);});
})();
</script>"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def _run(args: list[str], profile: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([args[0], *FLAGS, f"--user-data-dir={profile}", *args[1:]], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "HOME": profile})


def check_page(page: Path, work: Path) -> dict[str, Any]:
    """Load ``page`` (a copy with the two scripts) and return the verdict plus Chromium's console errors."""
    exe = chromium()
    assert exe is not None
    text = page.read_text(encoding="utf-8")
    text = text.replace("<head>", "<head>" + HOOK, 1)
    i = text.rindex("</body>")
    probe = work / "probe.html"
    probe.write_text(text[:i] + CHECK + text[i:], encoding="utf-8")
    with tempfile.TemporaryDirectory(dir=work) as profile:
        proc = _run([exe, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=60000", "--dump-dom",
                     probe.as_uri()], profile)
    m = re.search(r'<pre id="tk-check">(.*?)</pre>', proc.stdout, re.S)
    assert m is not None, f"no verdict in the dumped DOM; chromium rc={proc.returncode}, stderr tail: {proc.stderr[-2000:]}"
    out: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    out["console_errors"] = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln and ("ERROR" in ln or "error" in ln.lower())]
    return out


def screenshot(page: Path, png: Path, work: Path, size: tuple[int, int] = (1280, 2000)) -> None:
    exe = chromium()
    assert exe is not None
    with tempfile.TemporaryDirectory(dir=work) as profile:
        proc = _run([exe, f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=60000",
                     f"--screenshot={png}", page.as_uri()], profile)
    assert png.exists(), f"no screenshot; chromium rc={proc.returncode}, stderr tail: {proc.stderr[-2000:]}"
