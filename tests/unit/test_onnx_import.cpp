// ft import onnx: a torch.onnx BERT export (tests/data/onnx/tiny-bert, made
// by scripts/onnx-fixtures.py) read back as HF weights whose hidden states
// are ONNX Runtime's, and the graphs it must refuse, one line each.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "ft/base/error.h"
#include "ft/model/onnx_import.h"
// doctest after LibTorch's headers: Debian's c10 logging brings glog's CHECK,
// which would otherwise replace doctest's and abort on the first failed check.
#include <doctest/doctest.h>
#include "ft_run.h"
#include "ft_test.h"

namespace fsys = std::filesystem;
using nlohmann::json;

namespace {

// tiny-bert: opset 14, LayerNorm decomposed (ReduceMean, Pow, Sqrt);
// tiny-bert-opset17: the same model as LayerNormalization nodes.
fsys::path fixture(const std::string& name = "tiny-bert") { return ft_test::source_dir() / "tests" / "data" / "onnx" / name; }

json read_json(const fsys::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

void write_model(const onnx::ModelProto& m, const fsys::path& file) {
  std::ofstream out(file, std::ios::binary);
  REQUIRE(m.SerializeToOstream(&out));
}

// A graph with one float initializer and one node reading it.
onnx::ModelProto one_node_model(const std::string& weight, const std::string& op, const std::string& domain = "") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* w = g->add_initializer();
  w->set_name(weight);
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(2);
  for (int i = 0; i < 4; ++i) w->add_float_data(0.5f * static_cast<float>(i));
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name("node0");
  n->add_input("x");
  n->add_input(weight);
  n->add_output("y");
  return m;
}

}  // namespace

TEST_CASE("a torch.onnx BERT export imports to weights whose hidden states are ONNX Runtime's") {
  std::string name = "tiny-bert";
  SUBCASE("opset 14, LayerNorm decomposed") {}
  SUBCASE("opset 17, LayerNormalization") { name = "tiny-bert-opset17"; }
  CAPTURE(name);
  const json expected = read_json(fixture(name) / "expected.json");
  ft_test::TempDir tmp("onnx-import");
  const fsys::path out = tmp.path() / "model";
  const std::string log = ft_test::run_ok(
      fmt::format("import onnx '{}' --out '{}'", (fixture(name) / "model.onnx").string(), out.string()));
  CHECK(log.find("2 layers, hidden 32, 4 heads, intermediate 64") != std::string::npos);

  // config.json: what the graph and its shapes say.
  const json config = read_json(out / "config.json");
  CHECK(config.at("architectures") == json::array({"BertModel"}));
  for (const auto& [key, value] : expected.at("config").items()) {
    INFO(key);
    CHECK(config.at(key) == value);
  }
  CHECK_FALSE(config.contains("num_labels"));
  for (const char* file : {"model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json", "manifest.json"})
    CHECK(fsys::exists(out / file));

  // The hidden states ft computes from the imported weights against ONNX
  // Runtime's on the .onnx itself (a transposed or misnamed weight shows).
  std::string args = fmt::format("predict --checkpoint '{}'", out.string());
  const auto& texts = expected.at("texts");
  for (const auto& t : texts) args += " '" + t.at("text").get<std::string>() + "'";
  const std::string printed = ft_test::run_ok(args);  // a BertModel directory: feature-extraction by default
  std::istringstream lines(printed);
  size_t i = 0;
  double worst = 0.0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    REQUIRE(i < texts.size());
    const json got = json::parse(line);
    const json& want = texts[i++].at("last_hidden_state");
    REQUIRE(got.at("last_hidden_state").size() == want.size());
    for (size_t tok = 0; tok < want.size(); ++tok) {
      REQUIRE(got.at("last_hidden_state")[tok].size() == want[tok].size());
      for (size_t h = 0; h < want[tok].size(); ++h)
        worst = std::max(worst, std::abs(got["last_hidden_state"][tok][h].get<double>() - want[tok][h].get<double>()));
    }
  }
  CHECK(i == texts.size());
  INFO("max |ft - ONNX Runtime| = " << worst);
  CHECK(worst < 1e-5);

  // The imported tokenizer gives the export's ids.
  for (const auto& t : texts) {
    const fsys::path input = tmp.path() / "text.txt";
    std::ofstream(input) << t.at("text").get<std::string>() << "\n";
    const auto tok = ft_test::run_ft(fmt::format("tokenize --model '{}' < '{}'", out.string(), input.string()));
    REQUIRE(tok.exit_code == 0);
    CHECK(json::parse(tok.output).at("input_ids") == t.at("input_ids"));
  }
}

TEST_CASE("ft import onnx refuses what it cannot map, one line each, and writes nothing") {
  ft_test::TempDir tmp("onnx-refuse");
  const fsys::path out = tmp.path() / "model";

  SUBCASE("a truncated file") {
    const std::string bytes = ft_test::read_text(fixture() / "model.onnx");
    const fsys::path cut = tmp.path() / "cut.onnx";
    std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    fsys::copy_file(fixture() / "tokenizer.json", tmp.path() / "tokenizer.json");
    const auto r = ft_test::run_ft(fmt::format("import onnx '{}' --out '{}'", cut.string(), out.string()));
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("not a readable ONNX model (truncated, or not an .onnx file)") != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK_FALSE(fsys::exists(out));
  }
  SUBCASE("no tokenizer beside the model") {
    const fsys::path alone = tmp.path() / "alone" / "model.onnx";
    fsys::create_directories(alone.parent_path());
    fsys::copy_file(fixture() / "model.onnx", alone);
    const auto r = ft_test::run_ft(fmt::format("import onnx '{}' --out '{}'", alone.string(), out.string()));
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("no tokenizer.json beside it; pass --tokenizer FILE") != std::string::npos);
    CHECK_FALSE(fsys::exists(out));
  }
  SUBCASE("a non-BERT graph") {
    write_model(one_node_model("W", "MatMul"), tmp.path() / "g.onnx");
    CHECK(ft_test::error_of([&] { ft::read_onnx_encoder((tmp.path() / "g.onnx").string()); })
              .find("not a BERT encoder export") != std::string::npos);
  }
  SUBCASE("a quantised graph") {
    write_model(one_node_model("W", "DequantizeLinear"), tmp.path() / "q.onnx");
    CHECK(ft_test::error_of([&] { ft::read_onnx_encoder((tmp.path() / "q.onnx").string()); })
              .find("a quantised graph (node DequantizeLinear 'node0')") != std::string::npos);
    onnx::ModelProto m = one_node_model("W", "MatMul");
    m.mutable_graph()->mutable_initializer(0)->set_data_type(onnx::TensorProto::INT8);
    write_model(m, tmp.path() / "q8.onnx");
    CHECK(ft_test::error_of([&] { ft::read_onnx_encoder((tmp.path() / "q8.onnx").string()); })
              .find("weight 'W' is 8-bit integer") != std::string::npos);
  }
  SUBCASE("a task model's head") {
    onnx::ModelProto m = one_node_model("embeddings.word_embeddings.weight", "Gather");
    *m.mutable_graph()->add_initializer() = m.graph().initializer(0);
    m.mutable_graph()->mutable_initializer(1)->set_name("classifier.weight");
    write_model(m, tmp.path() / "h.onnx");
    CHECK(ft_test::error_of([&] { ft::read_onnx_encoder((tmp.path() / "h.onnx").string()); })
              .find("weight 'classifier.weight' is outside the BERT encoder") != std::string::npos);
  }
  SUBCASE("ONNX Runtime's fused attention") {
    write_model(one_node_model("W", "Attention", "com.microsoft"), tmp.path() / "f.onnx");
    CHECK(ft_test::error_of([&] { ft::read_onnx_encoder((tmp.path() / "f.onnx").string()); })
              .find("node Attention 'node0' is a fused ONNX Runtime kernel") != std::string::npos);
  }
}
