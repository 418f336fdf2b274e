"""pygls's protocol, minus one leak.

pygls 2.1 files every handler it runs for a notification (didChange included) under a fresh
id in `_request_futures`, and only answered requests are ever removed from there: a server
that sees a few thousand edits keeps a few thousand finished futures. Each one run for a
notification is removed here once it is done.
"""

from __future__ import annotations

from typing import Any

from pygls.protocol import LanguageServerProtocol


class DevicelintProtocol(LanguageServerProtocol):
    def _handle_notification(self, method_name: str, params: Any) -> None:
        known = set(self._request_futures)
        super()._handle_notification(method_name, params)
        for msg_id in set(self._request_futures) - known:
            future = self._request_futures[msg_id]

            def forget(_done: Any, msg_id: Any = msg_id) -> None:
                self._request_futures.pop(msg_id, None)

            future.add_done_callback(forget)
