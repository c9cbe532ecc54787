"""How results look: terminal tables, the HTML report, charts, and escaping for each output kind.

In: plans and results as the library returns them. Out: text for a terminal (:mod:`.tables`, sized by
:mod:`.terminal`), one self-contained HTML page (:mod:`.html`), SVG charts (:mod:`.charts`), and
user text escaped for where it goes (:mod:`.escape`).
Plans nothing and reads no flags: imports the library, never :mod:`fleetplan.commands`.
"""
