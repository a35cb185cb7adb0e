// TensorBoard event files (ft/observe/tensorboard.h): CRC-32C against published
// vectors, record framing and the hand-encoded protobufs decoded here with a
// reader of our own, and the scalars of a real `ft run` against its JSONL.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "ft/observe/tensorboard.h"
#include "ft_run.h"

namespace {

namespace fsys = std::filesystem;

// ---- a minimal protobuf wire-format reader (independent of the writer) ----

struct Field {
  int number = 0;
  int wire_type = 0;
  uint64_t varint = 0;  // wire type 0
  uint64_t fixed = 0;   // wire types 1 (8 bytes) and 5 (4 bytes)
  std::string bytes;    // wire type 2
};

uint64_t read_varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    REQUIRE(pos < s.size());
    const auto b = static_cast<uint8_t>(s[pos++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  FAIL("varint longer than 10 bytes");
  return 0;
}

uint64_t read_le(const std::string& s, size_t& pos, int n) {
  REQUIRE(pos + static_cast<size_t>(n) <= s.size());
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[pos + i])) << (8 * i);
  pos += static_cast<size_t>(n);
  return v;
}

std::vector<Field> parse_message(const std::string& s) {
  std::vector<Field> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t key = read_varint(s, pos);
    Field f;
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    switch (f.wire_type) {
      case 0: f.varint = read_varint(s, pos); break;
      case 1: f.fixed = read_le(s, pos, 8); break;
      case 5: f.fixed = read_le(s, pos, 4); break;
      case 2: {
        const uint64_t n = read_varint(s, pos);
        REQUIRE(pos + n <= s.size());
        f.bytes = s.substr(pos, n);
        pos += n;
        break;
      }
      default: FAIL("unexpected wire type " << f.wire_type);
    }
    out.push_back(f);
  }
  return out;
}

double as_double(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

float as_float(uint64_t bits) {
  const auto b32 = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b32, 4);
  return f;
}

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

Event decode_event(const std::string& data) {
  Event e;
  for (const Field& f : parse_message(data)) {
    if (f.number == 1) {
      REQUIRE(f.wire_type == 1);
      e.wall_time = as_double(f.fixed);
    } else if (f.number == 2) {
      REQUIRE(f.wire_type == 0);
      e.step = static_cast<int64_t>(f.varint);
    } else if (f.number == 3) {
      REQUIRE(f.wire_type == 2);
      e.file_version = f.bytes;
    } else if (f.number == 5) {
      REQUIRE(f.wire_type == 2);
      for (const Field& v : parse_message(f.bytes)) {
        REQUIRE(v.number == 1);
        std::string tag;
        float value = std::nanf("");
        for (const Field& vf : parse_message(v.bytes)) {
          if (vf.number == 1) tag = vf.bytes;
          if (vf.number == 2) {
            REQUIRE(vf.wire_type == 5);
            value = as_float(vf.fixed);
          }
        }
        e.values.emplace_back(tag, value);
      }
    } else {
      FAIL("unexpected Event field " << f.number);
    }
  }
  return e;
}

// Every record of a TFRecord file, both masked CRCs checked.
std::vector<std::string> read_records(const fsys::path& file) {
  const std::string s = ft_test::read_text(file);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    REQUIRE(pos + 12 <= s.size());
    const size_t len_at = pos;
    const uint64_t len = read_le(s, pos, 8);
    const auto len_crc = static_cast<uint32_t>(read_le(s, pos, 4));
    CHECK(len_crc == ft::masked_crc32c(s.data() + len_at, 8));
    REQUIRE(pos + len + 4 <= s.size());
    std::string data = s.substr(pos, len);
    pos += len;
    const auto data_crc = static_cast<uint32_t>(read_le(s, pos, 4));
    CHECK(data_crc == ft::masked_crc32c(data.data(), data.size()));
    out.push_back(std::move(data));
  }
  return out;
}

std::vector<fsys::path> event_files(const fsys::path& dir) {
  std::vector<fsys::path> out;
  for (const auto& e : fsys::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("CRC-32C matches the published check values") {
  const std::string check = "123456789";
  CHECK(ft::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(ft::crc32c("", 0) == 0u);
  // RFC 3720 (iSCSI) B.4 vectors.
  std::vector<uint8_t> buf(32, 0x00);
  CHECK(ft::crc32c(buf.data(), buf.size()) == 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  CHECK(ft::crc32c(buf.data(), buf.size()) == 0x62A8AB43u);
  for (size_t i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  CHECK(ft::crc32c(buf.data(), buf.size()) == 0x46DD794Eu);
  for (size_t i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(31 - i);
  CHECK(ft::crc32c(buf.data(), buf.size()) == 0x113FDB5Cu);
  const uint32_t c = 0xE3069283u;
  CHECK(ft::masked_crc32c(check.data(), check.size()) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("an event file decodes record by record into the scalars written") {
  ft_test::TempDir tmp("tb-writer");
  const double before = now_seconds();
  fsys::path path;
  {
    ft::TensorBoardWriter w(tmp.path() / "tb");
    path = w.path();
    w.add_scalar("train/loss", 0.6931471805599453, 1);
    w.add_scalar("train/lr", 2e-5, 300000);  // a multi-byte varint step
    w.add_scalar("eval/accuracy", 1.0, -1);  // int64: ten-byte varint
    // Flushed per write: readable before the writer closes.
    CHECK(read_records(path).size() == 4);
  }
  const double after = now_seconds();
  static const std::regex kName(R"(events\.out\.tfevents\.(\d+)\..+\.(\d+)\.(\d+))");
  std::smatch m;
  const std::string name = path.filename().string();
  REQUIRE(std::regex_match(name, m, kName));
  CHECK(std::stoll(m[2]) == ::getpid());
  CHECK(std::abs(std::stod(m[1]) - before) <= 2.0);

  const auto records = read_records(path);
  REQUIRE(records.size() == 4);
  const Event first = decode_event(records[0]);
  CHECK(first.file_version == "brain.Event:2");
  CHECK(first.step == 0);
  CHECK(first.values.empty());
  CHECK(first.wall_time >= std::floor(before));
  CHECK(first.wall_time <= after);

  struct Want {
    const char* tag;
    float value;
    int64_t step;
  };
  const Want want[] = {{"train/loss", 0.6931471805599453f, 1}, {"train/lr", 2e-5f, 300000}, {"eval/accuracy", 1.0f, -1}};
  for (size_t i = 0; i < 3; ++i) {
    const Event e = decode_event(records[i + 1]);
    INFO("record " << i + 1);
    CHECK(e.file_version.empty());
    CHECK(e.step == want[i].step);
    REQUIRE(e.values.size() == 1);
    CHECK(e.values[0].first == want[i].tag);
    CHECK(e.values[0].second == want[i].value);
    CHECK(e.wall_time >= first.wall_time);
    CHECK(e.wall_time <= after);
  }
  // The exact bytes of one Event, as protoc would serialize it.
  const std::string bytes = ft::encode_scalar_event(1.5, 3, "t", 0.25f);
  const std::string expected("\x09\x00\x00\x00\x00\x00\x00\xf8\x3f\x10\x03\x2a\x0a\x0a\x08\x0a\x01t\x15\x00\x00\x80\x3e", 23);
  CHECK(bytes == expected);
}

TEST_CASE("two writers in one directory never share a file; a bad directory names the key") {
  ft_test::TempDir tmp("tb-two");
  ft::TensorBoardWriter a(tmp.path());
  ft::TensorBoardWriter b(tmp.path());
  CHECK(a.path() != b.path());
  CHECK(event_files(tmp.path()).size() == 2);
  ft_test::TempDir bad("tb-bad");
  std::ofstream(bad.path() / "file") << "x";
  const std::string err = ft_test::error_of([&] { ft::TensorBoardWriter w(bad.path() / "file" / "tb"); });
  CHECK(err.find("runtime.tensorboard_dir") != std::string::npos);
  CHECK(err.find('\n') == std::string::npos);
}

TEST_CASE("ft run's TensorBoard scalars equal its JSONL metrics") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  ft_test::TempDir tmp("tb-run");
  const auto metrics = tmp.path() / "m.jsonl";
  const auto tb = tmp.path() / "tb";
  const std::string args = fmt::format(
      "run --config configs/parity-tiny.yaml --max-steps 4 --threads 1 --metrics-out {} --set data.dev_fraction=0.25 "
      "--set train.eval_every=2 --set train.max_grad_norm=1.0 --set runtime.tensorboard_dir={}",
      metrics.string(), tb.string());
  const auto out = ft_test::run_ft(args);
  INFO("ft " << args << "\n" << out.output);
  REQUIRE(out.exit_code == 0);

  const auto files = event_files(tb);
  REQUIRE(files.size() == 1);
  const auto records = read_records(files[0]);
  REQUIRE(!records.empty());
  CHECK(decode_event(records[0]).file_version == "brain.Event:2");
  std::map<std::pair<std::string, int64_t>, float> scalars;
  for (size_t i = 1; i < records.size(); ++i) {
    const Event e = decode_event(records[i]);
    REQUIRE(e.values.size() == 1);
    CHECK(scalars.emplace(std::make_pair(e.values[0].first, e.step), e.values[0].second).second);
  }
  auto value = [&](const std::string& tag, int64_t step) {
    const auto it = scalars.find({tag, step});
    REQUIRE_MESSAGE(it != scalars.end(), "no " << tag << " at step " << step);
    return it->second;
  };

  const auto steps = ft_test::read_events(metrics, "step");
  REQUIRE(steps.size() == 4);
  for (const auto& j : steps) {
    const int64_t step = j.at("step").get<int64_t>();
    INFO("step " << step);
    CHECK(value("train/loss", step) == static_cast<float>(j.at("loss").get<double>()));
    CHECK(value("train/lr", step) == static_cast<float>(j.at("lr").get<double>()));
    CHECK(value("train/grad_norm", step) == static_cast<float>(j.at("grad_norm").get<double>()));
    CHECK(value("train/samples_per_s", step) == static_cast<float>(j.at("samples_per_s").get<double>()));
    CHECK(value("train/loss_scale", step) == static_cast<float>(j.value("loss_scale", 1.0)));
  }
  const auto evals = ft_test::read_events(metrics, "eval");
  REQUIRE(evals.size() == 2);
  for (const auto& j : evals) {
    const int64_t step = j.at("step").get<int64_t>();
    INFO("eval at step " << step);
    CHECK(value("eval/loss", step) == static_cast<float>(j.at("loss").get<double>()));
    CHECK(value("eval/accuracy", step) == static_cast<float>(j.at("accuracy").get<double>()));
    CHECK(value("eval/macro_f1", step) == static_cast<float>(j.at("macro_f1").get<double>()));
    for (const char* name : {"weighted_f1", "mcc", "roc_auc", "pr_auc"}) {
      INFO(name);
      CHECK(value(std::string("eval/") + name, step) == static_cast<float>(j.at(name).get<double>()));
    }
  }
  // Per step loss, lr, grad norm, samples/s, loss scale; per evaluation the loss and six scores.
  CHECK(scalars.size() == 4 * 5 + 2 * 7);
}
