"""The Azure Functions app: the HTTP API (one function, served through HTTP streams), the queue-triggered checks
and the event dispatcher.

The local host (`python -m local_host`) introspects this same `app` to run it without Core Tools.
"""

from __future__ import annotations

import azure.functions as func

from functions.events import bp as events
from functions.http_api import bp as http_api
from functions.triggers import bp as checks

app = func.FunctionApp(http_auth_level=func.AuthLevel.ANONYMOUS)
app.register_functions(http_api)
app.register_functions(checks)
app.register_functions(events)
