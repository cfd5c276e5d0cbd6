"""Rollout-side data: routed experts recorded by the engines."""

from .routes import RoutesError, decode_routes, encode_routes, route_dtype

__all__ = ["RoutesError", "decode_routes", "encode_routes", "route_dtype"]
