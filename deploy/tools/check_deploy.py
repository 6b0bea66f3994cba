#!/usr/bin/env python3
"""Checks of deploy/ that no off-the-shelf validator does (scripts/test-deploy runs them).

    check_deploy.py keda [RENDERED.yaml]   KEDA objects against KEDA's CRD schema (strict)
    check_deploy.py names                  stage and topic names in every deploy file = topology.yaml
    check_deploy.py metrics METRICS.txt    metric names in dashboard and alerts ⊆ what a worker and the producers export

Each prints one line per finding and exits 1 if there is any.

KEDA's schema: the `cloudcoil-models-keda` package on PyPI (pydantic models generated from KEDA's
CRDs; version 2.16.1.0 = KEDA 2.16.1) gives the JSON schema of ScaledObject and
TriggerAuthentication; it is made strict here (unknown fields are errors, as the API server's
structural-schema pruning would silently drop them).
"""
import json
import pathlib
import re
import sys

import yaml

from generate import PRODUCERS

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
problems = []


def problem(where, text):
    problems.append(f"{where}: {text}")


def rel(path):
    path = pathlib.Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def topology():
    topo = yaml.safe_load((ROOT / "topology.yaml").read_text())
    topics = {t["name"]: int(t.get("partitions", 1)) for t in topo["topics"]}
    stages = {s["name"]: s for s in topo["stages"]}
    return topo, topics, stages


def load_all(path):
    return [d for d in yaml.safe_load_all(pathlib.Path(path).read_text()) if d]


# ------------------------------------------------------------------------------------------------
# KEDA

# The Kafka scaler's trigger metadata (KEDA docs, scalers/apache-kafka), and what its
# TriggerAuthentication accepts. The CRD types trigger metadata only as map[string]string.
KAFKA_METADATA = {
    "bootstrapServers", "bootstrapServersFromEnv", "consumerGroup", "consumerGroupFromEnv", "topic",
    "topicFromEnv", "lagThreshold", "activationLagThreshold", "offsetResetPolicy", "allowIdleConsumers",
    "scaleToZeroOnInvalidOffset", "excludePersistentLag", "version", "partitionLimitation",
    "limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions", "sasl", "tls", "unsafeSsl",
}
KAFKA_AUTH = {"sasl", "username", "password", "tls", "ca", "cert", "key", "keyPassword",
              "oauthTokenEndpointUri", "scopes", "oauthExtensions"}


def strict(schema):
    """Every object with declared properties rejects others."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


def keda_schemas():
    from cloudcoil.models.keda import v1alpha1 as keda  # PyPI: cloudcoil-models-keda
    out = {}
    for kind in ("ScaledObject", "TriggerAuthentication"):
        schema = strict(getattr(keda, kind).model_json_schema(by_alias=True, mode="validation"))
        # The models type apiVersion/kind loosely; pin them.
        schema["properties"]["apiVersion"] = {"const": "keda.sh/v1alpha1"}
        schema["properties"]["kind"] = {"const": kind}
        schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind", "metadata", "spec"})
        out[kind] = schema
    return out


def check_keda(rendered=None):
    import jsonschema
    schemas = keda_schemas()
    sources = [rendered] if rendered else sorted((DEPLOY / "k8s").rglob("*.yaml"))
    _, topics, stages = topology()
    seen = {"ScaledObject": 0, "TriggerAuthentication": 0}
    for path in sources:
        for doc in load_all(path):
            if not str(doc.get("apiVersion", "")).startswith("keda.sh/"):
                continue
            kind = doc.get("kind")
            where = f"{rel(path)} {kind}/{doc.get('metadata', {}).get('name')}"
            if kind not in schemas:
                problem(where, "no KEDA schema for this kind")
                continue
            seen[kind] += 1
            validator = jsonschema.Draft202012Validator(schemas[kind])
            for err in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
                problem(where, f"{'/'.join(map(str, err.absolute_path)) or '(root)'}: {err.message}")
            spec = doc.get("spec", {})
            if kind == "TriggerAuthentication":
                for ref in spec.get("secretTargetRef", []):
                    if ref.get("parameter") not in KAFKA_AUTH:
                        problem(where, f"secretTargetRef parameter '{ref.get('parameter')}' is not one of the Kafka scaler's")
                continue
            # ScaledObject: the rules of this project.
            name = spec.get("scaleTargetRef", {}).get("name")
            stage = stages.get(name)
            if stage is None:
                problem(where, f"scaleTargetRef '{name}' is not a stage of topology.yaml")
                continue
            # A stateful stage with several inputs joins them per partition number: one topic's count.
            joined = "changelog" in stage and len(stage["inputs"]) > 1
            parts = max(topics[t] for t in stage["inputs"]) if joined else sum(topics[t] for t in stage["inputs"])
            if spec.get("maxReplicaCount") != parts:
                problem(where, f"maxReplicaCount {spec.get('maxReplicaCount')} != input partitions {parts}")
            if not 0 <= spec.get("minReplicaCount", 0) <= parts:
                problem(where, "minReplicaCount outside 0..partitions")
            for trig in spec.get("triggers", []):
                if trig.get("type") != "kafka":
                    problem(where, f"trigger type {trig.get('type')} (expected kafka)")
                    continue
                md = trig.get("metadata", {})
                for key in md:
                    if key not in KAFKA_METADATA:
                        problem(where, f"trigger metadata '{key}' is not a Kafka scaler parameter")
                for key in ("bootstrapServers", "consumerGroup", "topic", "lagThreshold", "activationLagThreshold"):
                    if key not in md:
                        problem(where, f"trigger metadata lacks {key}")
                if md.get("consumerGroup") != stage.get("group", stage["name"]):
                    problem(where, f"consumerGroup {md.get('consumerGroup')} is not the stage's group")
                if md.get("topic") != ",".join(stage["inputs"]):
                    problem(where, f"topic {md.get('topic')} is not the stage's input {stage['inputs']}")
                for key in ("lagThreshold", "activationLagThreshold"):
                    if key in md and not re.fullmatch(r"\d+", str(md[key])):
                        problem(where, f"{key} '{md[key]}' is not a whole number")
    for kind, n in seen.items():
        if n == 0:
            problem("deploy/k8s", f"no {kind} found")
    if rendered is None:
        missing = set(stages) - {p.stem for p in (DEPLOY / "k8s/stages").glob("*.yaml")}
        for m in sorted(missing):
            problem("deploy/k8s/stages", f"no ScaledObject for stage {m}")
    print(f"keda: {seen['ScaledObject']} ScaledObject(s), {seen['TriggerAuthentication']} TriggerAuthentication(s) "
          f"checked against KEDA's CRD schema (cloudcoil-models-keda) and the Kafka scaler's parameters")


# ------------------------------------------------------------------------------------------------
# Names

NAME_LABELS = ("stage", "topic", "group", "service")


def check_names():
    topo, topics, stages = topology()
    stage_names = set(stages)
    groups = {s.get("group", n) for n, s in stages.items()}

    def expect_stage(where, name):
        if name not in stage_names:
            problem(where, f"'{name}' is not a stage of topology.yaml")

    def expect_topic(where, name):
        if name not in topics:
            problem(where, f"'{name}' is not a topic of topology.yaml")

    producers = {p["name"]: p["args"] for p in PRODUCERS}

    # Compose: one service per stage, named after it, running it; one per producer, running it.
    compose = yaml.safe_load((DEPLOY / "compose/compose.yaml").read_text())
    infra = {"kafka", "topics", "prometheus"}
    for name, args in producers.items():
        svc = compose["services"].get(name)
        if svc is None:
            problem("deploy/compose/compose.yaml", f"no service for producer {name}")
        elif svc.get("command", [])[:len(args)] != args:
            problem(f"deploy/compose/compose.yaml services.{name}", f"command {svc.get('command', [])[:len(args)]} does not run {' '.join(args)}")
    services = set(compose["services"]) - infra - set(producers)
    for missing in sorted(stage_names - services):
        problem("deploy/compose/compose.yaml", f"no service for stage {missing}")
    for name in sorted(services):
        svc = compose["services"][name]
        where = f"deploy/compose/compose.yaml services.{name}"
        expect_stage(where, name)
        cmd = svc.get("command", [])
        if cmd[:2] != ["worker", name]:
            problem(where, f"command {cmd[:2]} does not run stage {name}")
        for bad in ("container_name", "ports"):
            if bad in svc:
                problem(where, f"{bad} stops `--scale` from working")
    # Prometheus in compose: one DNS name per stage service.
    prom = yaml.safe_load((DEPLOY / "compose/prometheus.yml").read_text())
    dns = [n for sc in prom["scrape_configs"] for d in sc.get("dns_sd_configs", []) for n in d["names"]]
    if set(dns) != stage_names | set(producers):
        problem("deploy/compose/prometheus.yml", f"scraped names {sorted(set(dns) ^ (stage_names | set(producers)))} differ from the stages and producers")

    # Kubernetes: Deployment per stage running it; the topology ConfigMap is topology.yaml.
    k8s_stages = set()
    for path in sorted((DEPLOY / "k8s").rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_all(path):
            kind, name = doc.get("kind"), doc.get("metadata", {}).get("name")
            where = f"{rel(path)} {kind}/{name}"
            if path.parent.name == "producers":
                if kind == "Deployment":
                    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
                    if name not in producers or args[:len(producers[name])] != producers[name]:
                        problem(where, f"args {args[:3]} do not run a producer named {name}")
                    if doc["spec"].get("replicas") != 1:
                        problem(where, "a producer runs as exactly one replica")
                continue
            if kind in ("Deployment", "PodDisruptionBudget", "ScaledObject"):
                expect_stage(where, name)
                if path.stem != name:
                    problem(where, f"file name {path.name} differs from the stage")
            if kind == "Deployment":
                k8s_stages.add(name)
                spec = doc["spec"]["template"]["spec"]
                args = spec["containers"][0]["args"]
                if args[:2] != ["worker", name]:
                    problem(where, f"args {args[:2]} do not run stage {name}")
                if spec.get("terminationGracePeriodSeconds", 30) <= 30:
                    problem(where, "terminationGracePeriodSeconds must exceed the 30 s shutdown deadline")
            if kind == "ConfigMap" and name == "pipeline-topology":
                if doc["data"]["topology.yaml"] != (ROOT / "topology.yaml").read_text():
                    problem(where, "differs from topology.yaml (run deploy/tools/generate.py)")
    for missing in sorted(stage_names - k8s_stages):
        problem("deploy/k8s", f"no Deployment for stage {missing}")
    kust = yaml.safe_load((DEPLOY / "k8s/kustomization.yaml").read_text())
    listed = set(kust["resources"])
    on_disk = {str(p.relative_to(DEPLOY / "k8s")) for p in (DEPLOY / "k8s").rglob("*.yaml")} - {"kustomization.yaml"}
    for f in sorted(on_disk - listed):
        problem("deploy/k8s/kustomization.yaml", f"{f} is not listed in resources")
    for f in sorted(listed - on_disk):
        problem("deploy/k8s/kustomization.yaml", f"lists {f}, which does not exist")

    # systemd: the target wants one instance per stage.
    target = (DEPLOY / "systemd/pipeline-workers.target").read_text()
    wanted = set(re.findall(r"pipeline-worker@([^ .\n]+)\.service", target))
    if wanted != stage_names:
        problem("deploy/systemd/pipeline-workers.target", f"instances {sorted(wanted ^ stage_names)} differ from the stages")

    # Monitoring: label values in queries, rules and their tests name real stages, topics, groups.
    mon_files = [DEPLOY / "monitoring/alerts.rules.yml", DEPLOY / "monitoring/grafana-dashboard.json",
                 *sorted((DEPLOY / "monitoring/tests").glob("*.yml"))]
    for path in mon_files:
        text = path.read_text()
        # PromQL matchers (stage="x", also inside a JSON string) and YAML flow maps ({stage: x}).
        found = re.findall(r'\b(stage|topic|group)\s*=\s*\\?"([^"\\]+)', text)
        found += re.findall(r'[{,]\s*(stage|topic|group):\s*([A-Za-z0-9._-]+)', text)
        for label, value in found:
            if value.startswith("$"):
                continue
            where = rel(path)
            if label == "stage":
                expect_stage(where, value)
            elif label == "group":
                if value not in groups:
                    problem(where, f"'{value}' is not a consumer group of topology.yaml")
            else:
                expect_topic(where, value)

    # Any file under deploy/: a word that looks like one of our topic names (app.something) or
    # stage names (app-something) must be one. Prefixes come from topology.yaml itself.
    prefixes = sorted({n.split(".")[0].split("-")[0] for n in list(topics) + list(stage_names)})
    pat = re.compile(r"(?<![\w./-])((?:%s)(?:[.-][a-z0-9]+)+)(?![\w/-])" % "|".join(map(re.escape, prefixes)))
    # Catalog chain names (prices.decode) and named outputs (prices.candles.1m) are not topics.
    chains = {c for s in stages.values() for c in s.get("chain", [])}
    chains |= {o for s in stages.values() for o in (s.get("outputs") or {})}
    allowed_other = {"pipeline-worker", "pipeline-workers", "pipeline-topology", "pipeline-worker@",
                     "pipeline-workers.target", "pipeline.stage", "pipeline-workers.service"}
    for path in sorted(DEPLOY.rglob("*")):
        if not path.is_file() or path.suffix not in (".yaml", ".yml", ".json", ".md", ".service", ".target", ".py"):
            continue
        if path.name in ("generate.py", "check_deploy.py"):
            continue
        for m in pat.finditer(path.read_text()):
            word = m.group(1).rstrip(".")
            for suffix in (".service", ".env", ".yaml"):
                if word.endswith(suffix) and word[: -len(suffix)] in stage_names:
                    word = word[: -len(suffix)]
            if word in topics or word in chains or word in stage_names or word in allowed_other:
                continue
            if word.endswith(".service") and ["ingest", "poll", word[: -len(".service")]] in producers.values():
                continue  # pipeline-ingest-poll@SOURCE.service
            if word.startswith("pipeline") and word not in ("pipeline.dead-letters",):
                continue  # the project's own words (pipeline-worker@STAGE, pipeline_..., pipeline.example)
            problem(rel(path), f"'{word}' looks like a topic or stage name but topology.yaml has no such")
    print(f"names: {len(stage_names)} stages, {len(topics)} topics of topology.yaml against compose, "
          f"prometheus.yml, k8s, systemd, monitoring and the rest of deploy/")


# ------------------------------------------------------------------------------------------------
# Metric names

PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets", "histogram_quantile",
    "abs", "absent", "absent_over_time", "clamp_min", "clamp_max", "label_replace", "label_join", "time",
    "vector", "scalar", "sort", "sort_desc", "avg_over_time", "max_over_time", "min_over_time", "sum_over_time",
    "last_over_time", "predict_linear", "round", "ceil", "floor", "inf", "nan", "le", "label_values",
}


def metric_names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)   # strings
    e = re.sub(r"\{[^}]*\}", "", e)                  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                 # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\{?\w+\}?", "", e)                # dashboard variables
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if word in PROMQL_WORDS or rest.startswith("("):
            continue
        if re.fullmatch(r"\d+[smhdwy]?", word) or re.fullmatch(r"[eE]\d*", word):
            continue
        names.add(word)
    return names


def exported_names(metrics_text):
    names = set()
    for line in metrics_text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            name, kind = m.groups()
            if kind in ("histogram", "summary"):
                names |= {name + "_bucket", name + "_sum", name + "_count"} if kind == "histogram" else {name, name + "_sum", name + "_count"}
            else:
                names.add(name)
        elif line and not line.startswith("#"):
            names.add(re.match(r"[A-Za-z_:][A-Za-z0-9_:]*", line).group(0))
    return names


def check_metrics(metrics_file):
    exported = exported_names(pathlib.Path(metrics_file).read_text())
    # Series every Prometheus adds to a scrape, not the worker's.
    scrape_series = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
    used = {}

    def note(where, expr):
        for n in metric_names(expr):
            used.setdefault(n, set()).add(where)

    dash = json.loads((DEPLOY / "monitoring/grafana-dashboard.json").read_text())
    n_queries = 0
    for p in dash["panels"]:
        for t in p.get("targets", []):
            note(f"dashboard panel '{p['title']}'", t["expr"])
            n_queries += 1
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and q:
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", q)
            if not m:
                problem("dashboard", f"variable {v['name']}: cannot read query {q}")
            else:
                used.setdefault(m.group(1), set()).add(f"dashboard variable {v['name']}")
            n_queries += 1
    rules = yaml.safe_load((DEPLOY / "monitoring/alerts.rules.yml").read_text())
    n_rules = 0
    for g in rules["groups"]:
        for r in g["rules"]:
            note(f"alert {r.get('alert') or r.get('record')}", r["expr"])
            n_rules += 1
    for path in sorted((DEPLOY / "monitoring/tests").glob("*.yml")):
        for t in yaml.safe_load(path.read_text())["tests"]:
            for s in t.get("input_series", []):
                note(f"{rel(path)} input series", s["series"])
    for name, wheres in sorted(used.items()):
        if name in exported or name in scrape_series:
            continue
        problem("metrics", f"{name} (used by {', '.join(sorted(wheres))}) is not exported by the worker or the producers")
    own = {n for n in exported if n.startswith(("pipeline_", "kafka_"))}
    print(f"metrics: {n_queries} dashboard queries and {n_rules} alert rules use {len(used)} names; "
          f"the worker exported {len(own)} pipeline_/kafka_ series names")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "keda":
        check_keda(args[0] if args else None)
    elif cmd == "names":
        check_names()
    elif cmd == "metrics":
        check_metrics(args[0])
    else:
        sys.exit(f"unknown check {cmd}")
    for p in problems:
        print(f"  FAIL {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
