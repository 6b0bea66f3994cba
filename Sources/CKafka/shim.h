// The only door into librdkafka. Compiled against Debian's librdkafka-dev headers;
// at run time the project loads librdkafka 2.1+ (see scripts/install-deps).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
