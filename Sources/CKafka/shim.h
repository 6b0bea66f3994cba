// The only door into librdkafka. Compiled against Debian's librdkafka-dev headers;
// at run time the project loads librdkafka 2.1+ (see scripts/install-deps).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

// Swift does not call C's variadic functions: one broker error (with its delay) at a time.
static inline rd_kafka_resp_err_t ckafka_mock_broker_push_request_error(
    rd_kafka_mock_cluster_t *mcluster, int32_t broker_id, int16_t api_key, rd_kafka_resp_err_t err, int rtt_ms) {
    return rd_kafka_mock_broker_push_request_error_rtts(mcluster, broker_id, api_key, 1, err, rtt_ms);
}
