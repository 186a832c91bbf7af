"""A Twilio webhook's form fields as its signature covers them.

Twilio signs every value of a key sent more than once (each appended after the key, values sorted): a plain dict
of the form kept the last value alone, so such a request was refused as forged, and one signed over the last
value alone passed. Twilio's `RequestValidator` reads a multi-valued form through `getall`.
"""

from __future__ import annotations


class FormFields(dict):
    """The form's fields, the last value of each as a dict's, and all of them through `getall`."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def getall(self, key: str) -> list[str]:
        return [value for name, value in self._pairs if name == key]
