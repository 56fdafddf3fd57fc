"""Helpers the tests import: events, configurations, loopback servers, peers and fault tools."""
