// safetensors reader/writer and pytorch_model.bin loading.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "ft/base/error.h"
#include "ft/base/fs.h"
#include "ft/io/safetensors.h"
#include "ft/io/torch_bin.h"
#include "ft_test.h"

namespace st = ft::safetensors;

namespace {

using ft_test::error_of;

std::string dtype_str(const at::Tensor& t) { return c10::toString(t.scalar_type()); }

// A file with this exact header text (no padding added) and buffer.
std::string file_bytes(const std::string& header, const std::string& buffer) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
  return out + header + buffer;
}

// Loading a file with `header` and `buffer_size` zero bytes fails naming the file and `expected`.
void check_rejected(const std::string& header, std::size_t buffer_size, const std::string& expected) {
  CAPTURE(header);
  const std::string message =
      error_of([&] { st::load_bytes(file_bytes(header, std::string(buffer_size, '\0')), "bad.safetensors"); });
  CAPTURE(message);
  CHECK(message.rfind("bad.safetensors: ", 0) == 0);
  CHECK(message.find(expected) != std::string::npos);
}

// One tensor of every dtype, given out of order so the writer must sort.
st::TensorList every_dtype() {
  using at::TensorOptions;
  return {
      {"bool", at::tensor({1, 0, 0, 1}, TensorOptions().dtype(at::kInt)).to(at::kBool)},
      {"f32", at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({2, 2})},
      {"i8", at::tensor({-1, 0, 127}, TensorOptions().dtype(at::kInt)).to(at::kChar)},
      {"f64", at::tensor({1.5, -2.25}, TensorOptions().dtype(at::kDouble))},
      {"i64", at::tensor({int64_t{-5}, int64_t{1} << 40})},
      {"a_i64", at::empty({0}, TensorOptions().dtype(at::kLong))},
      {"i32", at::scalar_tensor(7, TensorOptions().dtype(at::kInt))},
      {"bf16", at::tensor({1.0f}).to(at::kBFloat16)},
      {"f16", at::tensor({1.0f, -2.0f, 0.5f}).to(at::kHalf)},
      {"i16", at::tensor({-300, 300}, TensorOptions().dtype(at::kInt)).to(at::kShort)},
      {"u8", at::tensor({0, 255}, TensorOptions().dtype(at::kInt)).to(at::kByte)},
  };
}

const char* const kEveryDtypeHeader =
    R"({"a_i64":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},)"
    R"("i64":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
    R"("f64":{"dtype":"F64","shape":[2],"data_offsets":[16,32]},)"
    R"("f32":{"dtype":"F32","shape":[2,2],"data_offsets":[32,48]},)"
    R"("i32":{"dtype":"I32","shape":[],"data_offsets":[48,52]},)"
    R"("bf16":{"dtype":"BF16","shape":[1],"data_offsets":[52,54]},)"
    R"("f16":{"dtype":"F16","shape":[3],"data_offsets":[54,60]},)"
    R"("i16":{"dtype":"I16","shape":[2],"data_offsets":[60,64]},)"
    R"("i8":{"dtype":"I8","shape":[3],"data_offsets":[64,67]},)"
    R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[67,69]},)"
    R"("bool":{"dtype":"BOOL","shape":[4],"data_offsets":[69,73]},)"
    R"("__metadata__":{"format":"pt","note":"a \"q\"\n\u0001 ü"}})";

}  // namespace

TEST_CASE("serialize: every dtype, exact header layout and bytes, round trip") {
  const std::map<std::string, std::string> meta = {{"note", "a \"q\"\n\x01 ü"}, {"format", "pt"}};
  const std::string bytes = st::serialize(every_dtype(), meta);

  const std::string header = kEveryDtypeHeader;
  const std::size_t padded = (header.size() + 7) / 8 * 8;
  REQUIRE(bytes.size() == 8 + padded + 73);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n == padded);
  CHECK(bytes.substr(8, header.size()) == header);
  CHECK(bytes.substr(8 + header.size(), padded - header.size()) == std::string(padded - header.size(), ' '));

  const std::string data = bytes.substr(8 + padded);
  const std::string expected_tail("\x80\x3f"                      // bf16 1.0
                                  "\x00\x3c\x00\xc0\x00\x38"      // f16 1, -2, 0.5
                                  "\xd4\xfe\x2c\x01"              // i16 -300, 300
                                  "\xff\x00\x7f"                  // i8 -1, 0, 127
                                  "\x00\xff"                      // u8 0, 255
                                  "\x01\x00\x00\x01",             // bool
                                  21);
  CHECK(data.substr(52) == expected_tail);
  int64_t i64[2];
  std::memcpy(i64, data.data(), 16);
  CHECK(i64[0] == -5);
  CHECK(i64[1] == (int64_t{1} << 40));
  double f64[2];
  std::memcpy(f64, data.data() + 16, 16);
  CHECK(f64[0] == 1.5);
  CHECK(f64[1] == -2.25);

  const st::TensorList loaded = st::load_bytes(bytes, "mem");
  REQUIRE(loaded.size() == 11);
  const char* order[] = {"a_i64", "i64", "f64", "f32", "i32", "bf16", "f16", "i16", "i8", "u8", "bool"};
  const st::TensorList original = every_dtype();
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    CAPTURE(i);
    CHECK(loaded[i].first == order[i]);
    const auto& [name, tensor] = loaded[i];
    const auto it = std::find_if(original.begin(), original.end(), [&](const auto& p) { return p.first == name; });
    REQUIRE(it != original.end());
    CHECK(dtype_str(tensor) == dtype_str(it->second));
    CHECK(tensor.sizes() == it->second.sizes());
    CHECK(tensor.is_contiguous());
    CHECK(at::equal(tensor, it->second));
  }
  CHECK(loaded[4].second.dim() == 0);
  CHECK(loaded[4].second.item<int32_t>() == 7);
  CHECK(st::serialize(loaded, meta) == bytes);

  ft_test::TempDir dir("st-roundtrip");
  const std::string path = (dir.path() / "all.safetensors").string();
  st::save(path, loaded, meta);
  CHECK(ft::fs::read_file(path) == bytes);
  CHECK(st::metadata(path) == meta);
  const st::Header h = st::read_header(path);
  CHECK(h.entries.size() == 11);
  CHECK(h.data_start == 8 + padded);
  CHECK(h.buffer_size == 73);
  REQUIRE(h.find("f16") != nullptr);
  CHECK(h.find("f16")->begin == 54);
  CHECK(std::string(c10::toString(h.find("f16")->scalar_type)) == "Half");
  CHECK(h.find("missing") == nullptr);
  const st::TensorList from_file = st::load(path);
  REQUIRE(from_file.size() == 11);
  CHECK(st::serialize(from_file, meta) == bytes);
}

TEST_CASE("serialize: empty file and no metadata match the reference writer") {
  CHECK(st::serialize({}) == file_bytes("{}      ", ""));
  CHECK(st::serialize({}, {{"framework", "pt"}}) == file_bytes(R"({"__metadata__":{"framework":"pt"}}     )", ""));
  CHECK(st::load_bytes(file_bytes("{}      ", ""), "e").empty());
}

TEST_CASE("serialize: non-contiguous input is written in row-major order") {
  const at::Tensor t = at::arange(6, at::TensorOptions().dtype(at::kFloat)).view({2, 3}).t();
  const st::TensorList loaded = st::load_bytes(st::serialize({{"t", t}}), "mem");
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].second.sizes() == at::IntArrayRef({3, 2}));
  CHECK(loaded[0].second[0][1].item<float>() == 3.0f);
  CHECK(at::equal(loaded[0].second, t));
}

TEST_CASE("serialize: rejects what safetensors cannot hold") {
  const at::Tensor x = at::zeros({1});
  CHECK(error_of([&] { st::serialize({{"a", x}, {"a", x}}); }).find("duplicate tensor name 'a'") != std::string::npos);
  CHECK(error_of([&] { st::serialize({{"c", at::zeros({1}, at::kComplexFloat)}}); }).find("tensor 'c'") !=
        std::string::npos);
  CHECK(error_of([&] { st::serialize({{"u", at::Tensor()}}); }).find("tensor 'u' is undefined") != std::string::npos);
  CHECK(error_of([&] { st::serialize({{"__metadata__", x}}); }).find("reserved") != std::string::npos);
  CHECK(st::dtype_name(at::kBFloat16) == "BF16");
}

TEST_CASE("save: unwritable destination names the path") {
  ft_test::TempDir dir("st-save");
  const std::string path = (dir.path() / "no-such-dir" / "m.safetensors").string();
  const std::string message = error_of([&] { st::save(path, {{"x", at::zeros({2})}}); });
  CHECK(message.find("cannot write " + path) != std::string::npos);
}

TEST_CASE("fixtures: load values and re-serialize byte-identical") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny");
  const auto fixtures = ft_test::shared_dir() / "fixtures";
  for (const char* rel : {"parity-tiny/model.safetensors", "parity-tiny/data.safetensors",
                          "parity-tiny/ref_logits_step0.safetensors", "bench-tiny/data.safetensors"}) {
    const std::string path = (fixtures / rel).string();
    CAPTURE(path);
    const st::TensorList tensors = st::load(path);
    CHECK(st::serialize(tensors, st::metadata(path)) == ft::fs::read_file(path));
  }

  const std::string model = (fixtures / "parity-tiny/model.safetensors").string();
  CHECK(st::metadata(model) == std::map<std::string, std::string>{{"format", "pt"}, {"seed", "1234"}});
  const st::TensorList weights = st::load(model);
  CHECK(weights.size() == 41);
  CHECK(weights.front().first == "bert.embeddings.LayerNorm.bias");
  CHECK(weights.back().first == "classifier.weight");
  CHECK(weights.back().second.sizes() == at::IntArrayRef({6, 128}));

  const st::TensorList data = st::load((fixtures / "parity-tiny/data.safetensors").string());
  REQUIRE(data.size() == 4);
  CHECK(data[2].first == "labels");
  CHECK(dtype_str(data[2].second) == "Long");
  CHECK(at::equal(data[2].second.slice(0, 0, 8), at::tensor({3, 5, 0, 2, 1, 1, 1, 1}, at::kLong)));
  CHECK(data[1].first == "input_ids");
  CHECK(data[1].second[0][0].item<int64_t>() == 101);
  CHECK(data[1].second[0][1].item<int64_t>() == 11345);

  const st::TensorList logits = st::load((fixtures / "parity-tiny/ref_logits_step0.safetensors").string());
  REQUIRE(logits.size() == 1);
  CHECK(logits[0].second.sizes() == at::IntArrayRef({32, 6}));
  CHECK(logits[0].second[0][0].item<float>() == -0.013694345019757748f);
  CHECK(logits[0].second[0][2].item<float>() == 0.01666932925581932f);
}

TEST_CASE("reader: file-level problems name the file") {
  ft_test::TempDir dir("st-bad");
  const std::string short_path = (dir.path() / "short.safetensors").string();
  ft::fs::write_file_atomic(short_path, "abcde");
  std::string message = error_of([&] { st::read_header(short_path); });
  CHECK(message == short_path + ": not a safetensors file: 5 bytes, shorter than the 8-byte header length");

  const std::string missing = (dir.path() / "missing.safetensors").string();
  CHECK(error_of([&] { st::load(missing); }).find("cannot read " + missing + ": No such file") == 0);

  // Header length past the end of the file / absurdly large.
  std::string past = file_bytes("{}      ", "");
  past[0] = 100;
  CHECK(error_of([&] { st::load_bytes(past, "p.safetensors"); }) ==
        "p.safetensors: truncated or not a safetensors file: header length 100 runs past the end of the file (16 "
        "bytes)");
  std::string huge = file_bytes("{}      ", "");
  huge[7] = 0x01;  // 2^56
  CHECK(error_of([&] { st::load_bytes(huge, "h.safetensors"); }).find("larger than the 100 MB limit") !=
        std::string::npos);
}

TEST_CASE("reader: malformed headers are rejected with the reason") {
  const std::string f32 = R"("dtype":"F32","shape":[1],"data_offsets":)";
  check_rejected("not json", 0, "header is not valid JSON");
  check_rejected("{\"a\":{\"dtype\":\"F32\xff\"}}", 0, "header is not valid JSON");  // bad UTF-8
  check_rejected("[1,2]", 0, "header must be a JSON object, got array");
  check_rejected(R"({"a":[1]})", 0, "tensor 'a': expected an object");
  check_rejected(R"({"a":{"dtype":"Q8","shape":[1],"data_offsets":[0,1]}})", 1, "tensor 'a': unknown dtype 'Q8'");
  check_rejected(R"({"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})", 2,
                 "dtype U16 is not supported by LibTorch 1.13");
  check_rejected(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", 4, "shape value -1 is negative");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, "shape must hold integers");
  check_rejected(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})", 4,
                 "has more elements than can be addressed");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, "data_offsets must be [begin, end]");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8, "data_offsets must be [begin, end]");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":"0,4"}})", 4, "data_offsets must be [begin, end]");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4, "data_offsets value -4 is negative");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,"4"]}})", 4, "data_offsets must hold integers");
  check_rejected(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, "data_offsets end 0 is before begin 4");
  check_rejected("{\"a\":{" + f32 + "[0,8]}}", 4, "data_offsets end 8 is past the end of the data buffer (4 bytes)");
  check_rejected("{\"a\":{" + f32 + "[0,8]}}", 8, "data_offsets span 8 bytes but F32 [1] needs 1 x 4");
  check_rejected("{\"a\":{" + f32 + "[0,4]},\"b\":{" + f32 + "[2,6]}}", 6, "tensors 'a' and 'b' overlap");
  check_rejected("{\"a\":{" + f32 + "[0,4]},\"b\":{" + f32 + "[8,12]}}", 12,
                 "hole in the data buffer: bytes 4..8 before tensor 'b'");
  check_rejected("{\"a\":{" + f32 + "[4,8]}}", 8, "bytes 0..4 before tensor 'a'");
  check_rejected("{\"a\":{" + f32 + "[0,4]}}", 8, "the last 4 bytes (4..8) belong to no tensor");
  check_rejected("{\"a\":{" + f32 + "[0,4]},\"a\":{" + f32 + "[0,4]}}", 4, "duplicate tensor name 'a'");
  check_rejected("{\"a\":{" + f32 + "[0,4],\"dtype\":\"F32\"}}", 4, "duplicate key 'dtype'");
  check_rejected("{\"a\":{" + f32 + "[0,4]},\"__metadata__\":{\"seed\":1234}}", 4,
                 "__metadata__ value of 'seed' must be a string, got 1234");
  check_rejected(R"({"__metadata__":["x"]})", 0, "__metadata__ must be an object of strings");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1],"offsets":[0,4]}})", 4, "tensor 'a': unknown key 'offsets'");
  check_rejected(R"({"a":{"dtype":"F32","shape":[1]}})", 4, "tensor 'a': missing 'data_offsets'");
  check_rejected(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", 0, "past the end of the data buffer");
  // BOOL bytes other than 0/1 would be undefined behaviour in torch.
  const std::string bad_bool = file_bytes(R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x02");
  CHECK(error_of([&] { st::load_bytes(bad_bool, "b.safetensors"); }) ==
        "b.safetensors: tensor 'b': BOOL byte 1 has value 2 (must be 0 or 1)");
}

TEST_CASE("pytorch_model.bin: round trip through torch::pickle_save") {
  ft_test::TempDir dir("st-bin");
  const std::string path = (dir.path() / "pytorch_model.bin").string();
  const ft::TensorList tensors = {{"z.weight", at::arange(6, at::kFloat).view({2, 3})},
                                  {"a.bias", at::tensor({1, 2}, at::kLong)}};
  ft::save_pytorch_bin(path, tensors);
  const ft::TensorList loaded = ft::load_pytorch_bin(path);
  REQUIRE(loaded.size() == 2);
  CHECK(loaded[0].first == "z.weight");  // dict order, not sorted
  CHECK(loaded[1].first == "a.bias");
  CHECK(at::equal(loaded[0].second, tensors[0].second));
  CHECK(at::equal(loaded[1].second, tensors[1].second));

  // One entry: Python's pickler would use SETITEM (unreadable), LibTorch's writes SETITEMS.
  ft::save_pytorch_bin(path, {{"only", at::tensor({2.5f})}});
  const ft::TensorList one = ft::load_pytorch_bin(path);
  REQUIRE(one.size() == 1);
  CHECK(one[0].first == "only");
  CHECK(one[0].second.item<float>() == 2.5f);
}

TEST_CASE("pytorch_model.bin: valid pickles that are not a flat tensor dict") {
  ft_test::TempDir dir("st-bin-shape");
  const std::string path = (dir.path() / "x.bin").string();
  const auto write = [&](const c10::IValue& value) {
    const std::vector<char> bytes = torch::jit::pickle_save(value);
    ft::fs::write_file_atomic(path, std::string_view(bytes.data(), bytes.size()));
  };
  write(c10::IValue(at::zeros({2})));
  CHECK(error_of([&] { ft::load_pytorch_bin(path); }).rfind(path + ": expected a dict of tensors, found a Tensor", 0) ==
        0);

  c10::impl::GenericDict nested(c10::StringType::get(), c10::AnyType::get());
  c10::Dict<std::string, at::Tensor> inner;
  inner.insert("w", at::zeros({1}));
  inner.insert("b", at::zeros({1}));
  nested.insert("model", inner);
  nested.insert("step", 3);
  write(c10::IValue(nested));
  CHECK(error_of([&] { ft::load_pytorch_bin(path); })
            .rfind(path + ": entry 'model' is a GenericDict, not a tensor (nested state dicts are not supported)", 0) ==
        0);
}

TEST_CASE("pytorch_model.bin: unreadable inputs give one clear line") {
  ft_test::TempDir dir("st-bin-bad");
  const std::string legacy = (dir.path() / "legacy.bin").string();
  ft::fs::write_file_atomic(legacy, std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8", 12));
  std::string message = error_of([&] { ft::load_pytorch_bin(legacy); });
  CHECK(message.rfind(legacy + ": legacy (non-zip) torch.save format", 0) == 0);
  CHECK(message.find("_use_new_zipfile_serialization=True") != std::string::npos);

  const std::string text = (dir.path() / "text.bin").string();
  ft::fs::write_file_atomic(text, "hello");
  CHECK(error_of([&] { ft::load_pytorch_bin(text); }).rfind(text + ": not a PyTorch checkpoint", 0) == 0);

  const std::string garbage = (dir.path() / "garbage.bin").string();
  ft::fs::write_file_atomic(garbage, std::string("PK\x03\x04", 4) + std::string(60, 'x'));
  message = error_of([&] { ft::load_pytorch_bin(garbage); });
  CHECK(message.rfind(garbage + ": LibTorch cannot read this torch.save file (", 0) == 0);
  CHECK(message.find('\n') == std::string::npos);

  const std::string missing = (dir.path() / "missing.bin").string();
  CHECK(error_of([&] { ft::load_pytorch_bin(missing); }).rfind("cannot read " + missing, 0) == 0);
}
