"""Parses a metrics body with the prometheus-client package's parsers and prints what they saw.

usage: parse_metrics.py prometheus|openmetrics FILE

Prints one JSON object: family name -> [type, help, number of samples]. Exits non-zero (with the
parser's error) when the body does not parse. Used by tests/metrics.rs.
"""

import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics
from prometheus_client.parser import text_string_to_metric_families as prometheus


def main():
    kind, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        body = f.read()
    parse = {"prometheus": prometheus, "openmetrics": openmetrics}[kind]
    out = {}
    for family in parse(body):
        if family.name in out:
            raise SystemExit(f"family {family.name} seen twice")
        out[family.name] = [family.type, family.documentation, len(family.samples)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
