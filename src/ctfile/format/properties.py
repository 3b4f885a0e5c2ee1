"""Table properties that ctfile itself interprets (SPEC §Table properties).

Every other ``metadata.properties`` key is the user's and is kept as given.
"""

PARTITION_ROWS = "ctfile.partitionRows"
ROW_GROUP_ROWS = "ctfile.rowGroupRows"
COMPRESSION = "ctfile.compression"
CHECKPOINT_INTERVAL = "ctfile.checkpointInterval"

DEFAULT_PARTITION_ROWS = 1 << 20
DEFAULT_ROW_GROUP_ROWS = 1 << 20
DEFAULT_COMPRESSION = "zstd"
DEFAULT_CHECKPOINT_INTERVAL = 100


def int_property(properties: dict, key: str, default: int) -> int:
    """A positive int property; a missing or malformed value gives ``default``."""
    try:
        value = int(properties.get(key, default))
    except (TypeError, ValueError):
        return default
    return value if value > 0 else default
