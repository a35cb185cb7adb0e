// ft::OptionReader (ft/config/options.h): the one reader of strategy.options, its
// boolean rule, bounds, choices, unknown keys and exact error lines; and
// the ddp and horovod parsers built on it (their sources are compiled into
// this test, as workers_hvd does).
#include <map>
#include <stdexcept>
#include <string>

#include "ddp_options.h"
#include "ft/base/error.h"
#include "ft/config/options.h"
#include "ft_test.h"
#include "horovod_options.h"

namespace {

using Options = std::map<std::string, std::string>;
using ft_test::error_of;

ft::OptionReader reader(const Options& o) {
  return ft::OptionReader(o, "demo", {"flag", "count", "size", "mode", "name"});
}

}  // namespace

TEST_CASE("booleans: one rule, any case; the rest is refused naming the key and the rule") {
  for (const char* yes : {"true", "TRUE", "True", "1", "yes", "Yes", "on", "ON"}) {
    CAPTURE(yes);
    CHECK(reader({{"flag", yes}}).get_bool("flag", false) == true);
  }
  for (const char* no : {"false", "FALSE", "0", "no", "NO", "off", "Off"}) {
    CAPTURE(no);
    CHECK(reader({{"flag", no}}).get_bool("flag", true) == false);
  }
  CHECK(reader({}).get_bool("flag", true) == true);
  CHECK(reader({}).get_bool("flag", false) == false);
  for (const char* bad : {"maybe", "", "t", "2", " true", "yes "}) {
    CAPTURE(bad);
    CHECK(error_of([&] { reader({{"flag", bad}}).get_bool("flag", false); }) ==
          std::string("strategy.options.flag: '") + bad + "' is not a boolean (true/false, yes/no, on/off, 1/0)");
  }
  CHECK(ft::OptionReader::parse_bool("On") == true);
  CHECK(ft::OptionReader::parse_bool("0") == false);
  CHECK_FALSE(ft::OptionReader::parse_bool("y").has_value());
}

TEST_CASE("integers: whole decimal numbers within the range") {
  CHECK(reader({{"count", "7"}}).get_int("count", 1, {1}) == 7);
  CHECK(reader({{"count", "0"}}).get_int("count", 1, {0}) == 0);
  CHECK(reader({{"count", "-3"}}).get_int("count", 1, {}) == -3);
  CHECK(reader({}).get_int("count", 5, {1, 9}) == 5);
  CHECK(reader({{"count", "9"}}).get_int("count", 1, {1, 9}) == 9);
  CHECK(error_of([] { reader({{"count", "0"}}).get_int("count", 1, {1}); }) ==
        "strategy.options.count: '0' is not an integer >= 1");
  CHECK(error_of([] { reader({{"count", "10"}}).get_int("count", 1, {1, 9}, "workers, e.g. 2"); }) ==
        "strategy.options.count: '10' is not an integer from 1 to 9 (workers, e.g. 2)");
  CHECK(error_of([] { reader({{"count", "1.5"}}).get_int("count", 1, {1}); }) ==
        "strategy.options.count: '1.5' is not an integer >= 1");
  // No sign, spaces or overflow past the range's type.
  for (const char* bad : {"+2", " 2", "2 ", "", "0x10", "99999999999999999999"}) {
    CAPTURE(bad);
    CHECK(error_of([&] { reader({{"count", bad}}).get_int("count", 1, {0}); }) ==
          std::string("strategy.options.count: '") + bad + "' is not an integer >= 0");
  }
}

TEST_CASE("reals: finite numbers above an inclusive or exclusive minimum") {
  CHECK(reader({{"size", "0.25"}}).get_double("size", 1.0, ft::above(0)) == 0.25);
  CHECK(reader({{"size", "1e2"}}).get_double("size", 1.0, ft::above(0)) == 100.0);
  CHECK(reader({{"size", "0"}}).get_double("size", 1.0, ft::at_least(0)) == 0.0);
  CHECK(reader({}).get_double("size", 64.0, ft::at_least(0)) == 64.0);
  CHECK(error_of([] { reader({{"size", "0"}}).get_double("size", 1.0, ft::above(0), "MiB, e.g. 25"); }) ==
        "strategy.options.size: '0' is not a number > 0 (MiB, e.g. 25)");
  CHECK(error_of([] { reader({{"size", "-1"}}).get_double("size", 1.0, ft::at_least(0)); }) ==
        "strategy.options.size: '-1' is not a number >= 0");
  CHECK(error_of([] { reader({{"size", "0.5"}}).get_double("size", 1.0, ft::at_least(1.5)); }) ==
        "strategy.options.size: '0.5' is not a number >= 1.5");
  for (const char* bad : {"inf", "nan", "lots", "1,5", " 1", ""}) {
    CAPTURE(bad);
    CHECK(error_of([&] { reader({{"size", bad}}).get_double("size", 1.0, ft::above(0)); }) ==
          std::string("strategy.options.size: '") + bad + "' is not a number > 0");
  }
}

TEST_CASE("choices match without regard to case and come back spelled as allowed") {
  const std::vector<std::string> modes = {"FULL_SHARD", "none", "fp16"};
  CHECK(reader({{"mode", "full_shard"}}).get_choice("mode", "none", modes) == "FULL_SHARD");
  CHECK(reader({{"mode", "NONE"}}).get_choice("mode", "fp16", modes) == "none");
  CHECK(reader({}).get_choice("mode", "fp16", modes) == "fp16");
  CHECK(error_of([&] { reader({{"mode", "zip"}}).get_choice("mode", "none", modes); }) ==
        "strategy.options.mode: 'zip' is not one of FULL_SHARD, none, fp16");
  CHECK(ft::OptionReader::match_choice("Fp16", modes) == std::string("fp16"));
  CHECK_FALSE(ft::OptionReader::match_choice("fp1", modes).has_value());
}

TEST_CASE("strings, has() and fail_value") {
  const auto r = reader({{"name", ""}});
  CHECK(r.has("name"));
  CHECK_FALSE(r.has("mode"));
  CHECK(r.get_string("name", "x") == "");
  CHECK(reader({}).get_string("name", "x") == "x");
  CHECK(error_of([&] { r.fail_value("name", "a;b", "a list, e.g. a,b"); }) ==
        "strategy.options.name: 'a;b' is not a list, e.g. a,b");
}

TEST_CASE("unknown keys: refused at construction, naming the strategy and the known keys in order") {
  CHECK(error_of([] { reader({{"flag", "true"}, {"colour", "red"}}); }) ==
        "strategy.options.colour: unknown option for demo (known: flag, count, size, mode, name)");
  CHECK(error_of([] { ft::OptionReader({{"x", "1"}}, "single", {}); }) ==
        "strategy.options.x: unknown option for single (known: none)");
  // Checked before any value: a typo is named even when another value is bad.
  CHECK(error_of([] { reader({{"count", "lots"}, {"cuont", "2"}}); }) ==
        "strategy.options.cuont: unknown option for demo (known: flag, count, size, mode, name)");
  // A forwarding strategy keeps them, and they are not readable as its own.
  const ft::OptionReader keep({{"flag", "on"}, {"bucket_mb", "5"}}, "auto", {"flag"}, ft::OptionReader::Unknown::kKeep);
  CHECK(keep.get_bool("flag", false));
  CHECK(keep.unknown() == Options{{"bucket_mb", "5"}});
  CHECK(reader({{"flag", "1"}}).unknown().empty());
  // Reading a key the strategy did not declare is its bug, not the user's.
  CHECK_THROWS_AS(reader({}).get_bool("undeclared", false), std::logic_error);
  CHECK_THROWS_AS(keep.has("bucket_mb"), std::logic_error);
}

TEST_CASE("ddp options through the reader") {
  using ft::ddp::Compression;
  using ft::ddp::DdpOptions;
  const DdpOptions d = DdpOptions::parse({});
  CHECK(d.bucket_bytes == 25 * 1024 * 1024);
  CHECK(d.compression == Compression::None);
  const DdpOptions o = DdpOptions::parse({{"bucket_mb", "0.5"}, {"compression", "BF16"}});
  CHECK(o.bucket_bytes == 512 * 1024);
  CHECK(o.compression == Compression::BF16);
  CHECK(error_of([] { DdpOptions::parse({{"bucket_mb", "-1"}}); }) ==
        "strategy.options.bucket_mb: '-1' is not a number > 0 (bucket size in MiB, e.g. 25)");
  CHECK(error_of([] { DdpOptions::parse({{"bucket_mb", "1e-9"}}); }) ==
        "strategy.options.bucket_mb: 1e-9 MiB is smaller than one fp32 element");
  CHECK(error_of([] { DdpOptions::parse({{"compression", "zip"}}); }) ==
        "strategy.options.compression: 'zip' is not one of none, fp16, bf16");
  CHECK(error_of([] { DdpOptions::parse({{"bucketmb", "5"}}); }) ==
        "strategy.options.bucketmb: unknown option for ddp/ddp_amp (known: bucket_mb, compression, sparse_embedding)");
}

TEST_CASE("horovod options through the reader") {
  using ft::horovod::HorovodOptions;
  const HorovodOptions o = HorovodOptions::parse({{"overlap", "yes"}, {"compression", "FP16"}, {"fusion_mb", "0"}});
  CHECK(o.overlap);
  CHECK(o.fp16_compression);
  CHECK(o.fusion_mb == 0.0);
  CHECK(error_of([] { HorovodOptions::parse({{"overlap", "maybe"}}); }) ==
        "strategy.options.overlap: 'maybe' is not a boolean (true/false, yes/no, on/off, 1/0)");
  CHECK(error_of([] { HorovodOptions::parse({{"fuse", "1"}}); }) ==
        "strategy.options.fuse: unknown option for horovod (known: fusion_mb, cycle_ms, compression, overlap)");
}
