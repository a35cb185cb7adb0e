// ft export --onnx: the graph's interface (inputs, output, dynamic axes,
// opset, metadata) and its wiring (every value defined before it is read,
// every weight read) for each family and head, read back with ONNX's own
// protobuf code; and the refusals, one line each, nothing written. What the
// graphs compute is checked against transformers in ONNX Runtime by
// check_onnx_export (scripts/check-onnx-export.py), which needs the env.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "ft_run.h"
#include "ft_test.h"

namespace fsys = std::filesystem;

namespace {

fsys::path fixture(const std::string& rel) { return ft_test::source_dir() / "tests" / "data" / rel; }

onnx::ModelProto read_model(const fsys::path& file) {
  std::ifstream in(file, std::ios::binary);
  onnx::ModelProto m;
  REQUIRE(m.ParseFromIstream(&in));
  return m;
}

std::vector<std::string> names(const google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) out.push_back(v.name());
  return out;
}

// "batch_size" / "sequence_length" or the fixed size, per dimension.
std::vector<std::string> dims(const onnx::ValueInfoProto& v) {
  std::vector<std::string> out;
  for (const auto& d : v.type().tensor_type().shape().dim()) {
    out.push_back(d.has_dim_param() ? d.dim_param() : std::to_string(d.dim_value()));
  }
  return out;
}

std::string metadata(const onnx::ModelProto& m, const std::string& key) {
  for (const auto& p : m.metadata_props())
    if (p.key() == key) return p.value();
  return "";
}

// Every node input is a graph input, an initializer or an earlier node's
// output; every initializer is read; the graph output is written.
void check_wiring(const onnx::GraphProto& g) {
  std::set<std::string> defined, read;
  for (const auto& i : g.input()) defined.insert(i.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) {
      INFO(n.op_type() << " " << n.name() << " reads " << i);
      CHECK(defined.count(i) == 1);
      read.insert(i);
    }
    for (const auto& o : n.output()) defined.insert(o);
  }
  for (const auto& t : g.initializer()) {
    INFO("initializer " << t.name());
    CHECK(read.count(t.name()) == 1);
  }
  REQUIRE(g.output_size() == 1);
  CHECK(defined.count(g.output(0).name()) == 1);
}

struct Case {
  std::string dir;
  std::vector<std::string> inputs;
  std::string output;
  std::vector<std::string> output_dims;
  std::string problem_type;  // metadata (sequence classification only)
};

}  // namespace

TEST_CASE("ft export --onnx: every family and head, with HF's input and output names and dynamic axes") {
  ft_test::TempDir tmp("onnx-export");
  const std::vector<std::string> bert = {"input_ids", "attention_mask", "token_type_ids"};
  const std::vector<std::string> two = {"input_ids", "attention_mask"};
  const std::vector<Case> cases = {
      {"hf/tasks/bert-multi-label", bert, "logits", {"batch_size", "3"}, "multi_label_classification"},
      {"hf/tasks/bert-regression", bert, "logits", {"batch_size", "1"}, "regression"},
      {"hf/tasks/bert-token-classification", bert, "logits", {"batch_size", "sequence_length", "5"}, ""},
      {"hf/families/roberta", two, "logits", {"batch_size", "2"}, "single_label_classification"},
      {"hf/families/roberta-mlm", two, "logits", {"batch_size", "sequence_length", "5000"}, ""},
      {"hf/families/electra", bert, "logits", {"batch_size", "2"}, "single_label_classification"},
      {"hf/families/distilbert", two, "logits", {"batch_size", "2"}, "single_label_classification"},
      {"hf/families/distilbert-mlm", two, "logits", {"batch_size", "sequence_length", "2000"}, ""},
      {"hf/families/deberta-v2", two, "logits", {"batch_size", "2"}, "single_label_classification"},
      {"hf/families/modernbert", two, "logits", {"batch_size", "2"}, "single_label_classification"},
      {"hf/tasks/modernbert-token-classification", two, "logits", {"batch_size", "sequence_length", "5"}, ""},
      {"st/tiny-max-dense", bert, "sentence_embedding", {"batch_size", "16"}, ""},
  };
  for (const auto& c : cases) {
    INFO(c.dir);
    const fsys::path out = tmp.path() / (fsys::path(c.dir).filename().string() + ".onnx");
    const auto r = ft_test::run_ft(fmt::format("export --onnx {} {}", fixture(c.dir).string(), out.string()));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(r.output.find("exported ") != std::string::npos);
    const onnx::ModelProto m = read_model(out);
    CHECK(m.producer_name() == "ft");
    REQUIRE(m.opset_import_size() == 1);
    CHECK(m.opset_import(0).version() == 17);
    const auto& g = m.graph();
    CHECK(names(g.input()) == c.inputs);
    for (const auto& i : g.input()) {
      CHECK(i.type().tensor_type().elem_type() == onnx::TensorProto::INT64);
      CHECK(dims(i) == std::vector<std::string>{"batch_size", "sequence_length"});
    }
    REQUIRE(g.output_size() == 1);
    CHECK(g.output(0).name() == c.output);
    CHECK(dims(g.output(0)) == c.output_dims);
    CHECK(metadata(m, "problem_type") == c.problem_type);
    check_wiring(g);
  }
}

TEST_CASE("ft export --onnx --task feature-extraction: the encoder's last_hidden_state, a base model's by default") {
  ft_test::TempDir tmp("onnx-export-features");
  const fsys::path out = tmp.path() / "roberta.onnx";
  ft_test::run_ok(fmt::format("export --onnx --task feature-extraction {} {}", fixture("hf/families/roberta").string(),
                              out.string()));
  const onnx::ModelProto m = read_model(out);
  CHECK(m.graph().output(0).name() == "last_hidden_state");
  CHECK(dims(m.graph().output(0)) == std::vector<std::string>{"batch_size", "sequence_length", "32"});
  CHECK(metadata(m, "id2label").empty());
  check_wiring(m.graph());
  // The imported ONNX encoder is a BertModel directory: no head, so its hidden states.
  const fsys::path base = tmp.path() / "base";
  ft_test::run_ok(fmt::format("import onnx {0}/model.onnx --tokenizer {0}/tokenizer.json --out {1}",
                              fixture("onnx/tiny-bert").string(), base.string()));
  ft_test::run_ok(fmt::format("export --onnx {} {}", base.string(), (tmp.path() / "base.onnx").string()));
  CHECK(read_model(tmp.path() / "base.onnx").graph().output(0).name() == "last_hidden_state");
}

TEST_CASE("ft export --onnx --fp16: float16 weights, a float32 output, half the file") {
  ft_test::TempDir tmp("onnx-export-fp16");
  for (const char* dir : {"hf/families/modernbert", "hf/families/deberta-v2"}) {
    INFO(dir);
    const fsys::path full = tmp.path() / "full.onnx", half = tmp.path() / "half.onnx";
    ft_test::run_ok(fmt::format("export --onnx {} {}", fixture(dir).string(), full.string()));
    ft_test::run_ok(fmt::format("export --onnx --fp16 {} {}", fixture(dir).string(), half.string()));
    const onnx::ModelProto m = read_model(half);
    check_wiring(m.graph());
    CHECK(m.graph().output(0).type().tensor_type().elem_type() == onnx::TensorProto::FLOAT);
    int64_t halves = 0, singles = 0;
    for (const auto& t : m.graph().initializer()) {
      if (t.data_type() == onnx::TensorProto::FLOAT16) ++halves;
      if (t.data_type() == onnx::TensorProto::FLOAT) {
        ++singles;
        INFO("float32 initializer " << t.name());
        CHECK(t.name().find("inv_freq") != std::string::npos);  // only the rotary frequencies stay float32
      }
    }
    CHECK(halves > 20);
    const double ratio = static_cast<double>(fsys::file_size(half)) / static_cast<double>(fsys::file_size(full));
    CHECK(ratio > 0.45);
    CHECK(ratio < 0.55);
    fsys::remove(full);
    fsys::remove(half);
  }
}

TEST_CASE("ft export --onnx refuses, one line each and nothing written") {
  ft_test::TempDir tmp("onnx-export-bad");
  const std::string roberta = fixture("hf/families/roberta").string();
  const auto one_line = [](const ft_test::RunOutput& r, const std::string& says) {
    INFO(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(says) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') <= 1);
  };
  one_line(ft_test::run_ft(fmt::format("export --onnx {} {}/model.bin", roberta, tmp.path().string())),
           "should end in .onnx");
  one_line(ft_test::run_ft(fmt::format("export --onnx --task ner {} {}/x.onnx", roberta, tmp.path().string())),
           "--task takes only feature-extraction");
  // A head ft does not build: config.json names BertForQuestionAnswering.
  const fsys::path qa = tmp.path() / "qa";
  fsys::copy(fixture("hf/tasks/bert-regression"), qa);
  std::string config = ft_test::read_text(qa / "config.json");
  const auto at = config.find("BertForSequenceClassification");
  REQUIRE(at != std::string::npos);
  config.replace(at, std::string("BertForSequenceClassification").size(), "BertForQuestionAnswering");
  std::ofstream(qa / "config.json") << config;
  one_line(ft_test::run_ft(fmt::format("export --onnx {} {}/qa.onnx", qa.string(), tmp.path().string())),
           "is a head ft does not build");
  for (const char* f : {"model.bin", "x.onnx", "qa.onnx"}) CHECK_FALSE(fsys::exists(tmp.path() / f));
}
