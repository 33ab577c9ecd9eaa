"""The HTML report in a real browser: headless Chromium (Debian ``chromium``).

A copy of the report gets a small inline script that, once the page has loaded, counts
the images that decoded (``naturalWidth > 0``) and the script errors, and writes them
into the DOM; ``--dump-dom`` returns that DOM. Two broken copies check that the harness
does see a broken image and a script error. A screenshot is taken and decoded.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np

CHECK = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push(String(e.message || 'resource error'));
}, true);
window.addEventListener('load', function () {
  var imgs = Array.from(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var out = document.createElement('pre');
  out.id = 'render-check';
  out.textContent = JSON.stringify({images: imgs.length, decoded: ok, errors: window.__errors});
  document.body.appendChild(out);
});
</script>"""


def _chromium(chromium: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(chromium),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _render_check(chromium: Path, html: str, tmp_path: Path, name: str) -> dict:
    page = tmp_path / f"{name}.html"
    page.write_text(html.replace("</head>", CHECK + "</head>", 1))
    done = _chromium(
        chromium,
        tmp_path / f"profile-{name}",
        "--virtual-time-budget=10000",
        "--dump-dom",
        page.as_uri(),
    )
    found = re.search(r'<pre id="render-check">(.*?)</pre>', done.stdout, re.DOTALL)
    assert found, f"chromium returned no check (rc {done.returncode}): {done.stderr[-2000:]}"
    return json.loads(found.group(1).replace("&quot;", '"'))


def test_report_renders_its_plots(
    chromium: Path, native_report_files: tuple[Path, Path, str], tmp_path: Path
) -> None:
    html = native_report_files[0].read_text()
    n_img = len(re.findall(r"<img ", html))
    result = _render_check(chromium, html, tmp_path, "report")
    assert result == {"images": n_img, "decoded": n_img, "errors": []}
    assert n_img >= 7


def test_harness_sees_broken_images_and_script_errors(
    chromium: Path, native_report_files: tuple[Path, Path, str], tmp_path: Path
) -> None:
    html = native_report_files[0].read_text()
    first = re.search(r'src="data:image/png;base64,([^"]{200})', html)
    assert first
    broken = html.replace(first.group(1), "A" * 200, 1)  # a corrupt PNG
    result = _render_check(chromium, broken, tmp_path, "broken-image")
    assert result["decoded"] == result["images"] - 1
    throwing = html.replace("</body>", "<script>undefinedFunction();</script></body>", 1)
    result = _render_check(chromium, throwing, tmp_path, "script-error")
    assert any("undefinedFunction" in e for e in result["errors"])


def test_screenshot(
    chromium: Path, native_report_files: tuple[Path, Path, str], tmp_path: Path
) -> None:
    from PIL import Image

    shot = tmp_path / "report.png"
    done = _chromium(
        chromium,
        tmp_path / "profile-shot",
        "--window-size=1280,2400",
        "--hide-scrollbars",
        f"--screenshot={shot}",
        native_report_files[0].as_uri(),
    )
    assert shot.is_file(), done.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1280, 2400)
        pixels = np.asarray(im.convert("L"), dtype=np.float64)
    # a rendered page: mostly white background, with text and figures (not blank, not an error page)
    assert 0.02 < (pixels < 200).mean() < 0.6
    assert pixels.std() > 20
