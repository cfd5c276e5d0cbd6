"""R3 replay data: each train rank's routed-expert rows, packed from its replay plan."""

from .pack import Shipment, fill_route, replica_bytes, ship

__all__ = ["Shipment", "fill_route", "replica_bytes", "ship"]
