"""Items, loaders, generators and C/U splits."""

from zcp.data.schema import DataError, Item

__all__ = ["DataError", "Item"]
