# syntax=docker/dockerfile:1
# The pipeline as one image: `pipelinectl` (release build) on a slim Debian 12 runtime with
# librdkafka 2.16 and libvips, as a non-root user. Build and run:
#   docker build -t kafka-worker-pipeline .
#   docker run --rm kafka-worker-pipeline worker prices-candles --bootstrap-server kafka:9092
#   docker run --rm -it kafka-worker-pipeline dev        # topology.yaml and samples/ are in the WORKDIR
# deploy/compose/ and deploy/k8s/ use it; deploy/README.md explains both.

ARG SWIFT_IMAGE=swift:6.3-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
# The librdkafka runtime (see scripts/install-deps): Debian 12's librdkafka is 2.0.2, which cannot
# talk to KRaft-mode Kafka, so the self-contained 2.16 from the confluent-kafka wheel is used.
ARG CONFLUENT_KAFKA_VERSION=2.16.1

# ---- build: the release binary ------------------------------------------------------------------
FROM ${SWIFT_IMAGE} AS build
# Debian's packages follow the base image's point release; pinning them would break on every update.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      librdkafka-dev libvips-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so that a source change does not fetch them again.
COPY Package.swift ./
RUN swift package resolve
COPY Sources ./Sources
COPY Tests ./Tests
COPY Benchmarks ./Benchmarks
RUN swift build -c release --product pipelinectl --static-swift-stdlib \
 && install -D -m 0755 "$(swift build -c release --show-bin-path)/pipelinectl" /out/pipelinectl

# ---- librdkafka 2.16 from the confluent-kafka wheel ---------------------------------------------
FROM ${RUNTIME_IMAGE} AS librdkafka
ARG CONFLUENT_KAFKA_VERSION
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-pip unzip \
 && rm -rf /var/lib/apt/lists/*
RUN python3 -m pip download --no-deps --only-binary=:all: -d /wheels \
      "confluent-kafka==${CONFLUENT_KAFKA_VERSION}" \
 && unzip -q /wheels/confluent_kafka-*.whl 'confluent_kafka.libs/*' -d /unpacked \
 && install -D -m 0644 /unpacked/confluent_kafka.libs/librdkafka-*.so.1 /out/librdkafka.so.1

# ---- runtime -------------------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE} AS runtime
# libvips for the thumbnail stages; curl for health checks (compose); ca-certificates for SSL.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libvips42 libstdc++6 zlib1g ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=librdkafka /out/librdkafka.so.1 /usr/local/lib/pipeline/librdkafka.so.1
RUN echo /usr/local/lib/pipeline > /etc/ld.so.conf.d/pipeline.conf && ldconfig
COPY --from=build /out/pipelinectl /usr/local/bin/pipelinectl
RUN groupadd --system --gid 10001 pipeline \
 && useradd --system --uid 10001 --gid pipeline --home-dir /app --shell /usr/sbin/nologin pipeline
# The repository's layout, which `pipelinectl dev` and the defaults (--topology topology.yaml) expect.
WORKDIR /app
COPY --chown=root:root topology.yaml ./
COPY --chown=root:root samples ./samples
USER 10001:10001
# /metrics, /healthz, /readyz (--metrics-address 0.0.0.0:9464)
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/pipelinectl"]
CMD ["--help"]
