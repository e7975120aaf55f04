"""The local web page (`vram-detective serve`) and the static HTML report (`explain --html`).

service.py turns request parameters into exactly what the commands' `--json` prints; report.py renders
breakdowns as HTML with inline SVG (the page's fragments and the self-contained report); app.py is the
Starlette application; command.py the `serve` command. Starlette and uvicorn (the `[web]` extra) are
imported only by app.py and command.py's run(), so the command line starts without them.
"""
