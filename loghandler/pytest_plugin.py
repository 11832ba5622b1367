"""The pytest plugin's fixtures, ``loghandler_service`` and ``loghandler_capture``, under the
package's name.

pytest loads the plugin by itself (entry point ``pytest11``) from the top-level module
``_loghandler_pytestplugin``, which costs a run that does not use it nothing (see there). This
module names the same fixtures for a ``pytest_plugins = ["loghandler.pytest_plugin"]`` line, in
a run where plugin auto-loading is off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``).
"""

from __future__ import annotations

from _loghandler_pytestplugin import loghandler_capture, loghandler_service

__all__ = ["loghandler_capture", "loghandler_service"]
