"""Items, loaders, generators and C/U splits."""

from zcp.core.items import Item
from zcp.errors import DataError

__all__ = ["DataError", "Item"]
