"""The console forgets the module sources PySide6's import hook read (they held ~18 MB, see drop_import_sources)."""

from __future__ import annotations

import linecache

from meshdeck.ui.app import drop_import_sources


def test_the_sources_read_during_imports_are_dropped(qapp) -> None:
    import meshdeck.ui.views.dashboard.view  # noqa: F401  (a module imported after PySide6, as the console does)

    linecache.getline(__file__, 1)  # at least one cached source, whatever was imported before
    assert linecache.cache
    drop_import_sources()
    assert not linecache.cache
