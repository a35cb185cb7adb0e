// The bad-input catalogue: every kind of broken input a user can hand ft,
// each run end to end through the real `ft` binary. A case passes when ft
//   - exits non-zero by itself (no signal, no hang),
//   - says what is wrong in exactly one error line holding the case's
//     distinctive substrings (file, key, flag, tensor, rank), with nothing
//     else on stderr (in a launched job that line is the launcher's,
//     "ft: error: rank N: ...", carrying the failing worker's message),
//   - leaves nothing behind: the case's directory tree (inputs, and where
//     --output-dir / --metrics-out / --out point) is file for file what it
//     was (no new files, dirs, temp files or truncated ones), stdout holds
//     at most the startup line, and no process of the run is left.
// Messages per class are listed in docs/hardening.md "Bad input".
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ft/model/model.h"
#include "ft/io/safetensors.h"
#include "ft_sandbox.h"

namespace {

namespace fsys = std::filesystem;
using json = nlohmann::json;

// ------------------------------------------------------------ inputs

void write(const fsys::path& p, const std::string& text) {
  fsys::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

const char* const kVocab[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film",
                              "plot",  "the",   "very",  "was",   "a",      "##s",  "!"};

std::string vocab_without(const std::string& skip) {
  std::string v;
  for (const char* t : kVocab)
    if (skip != t) v += std::string(t) + "\n";
  return v;
}

std::string rows_jsonl() {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    s += R"({"text": "the film was good", "label": "pos"})" "\n";
    s += R"({"text": "the plot was bad", "label": "neg"})" "\n";
  }
  return s;
}

// A model small enough to build in milliseconds, sized to kVocab.
ft::BertConfig tiny_config() {
  ft::BertConfig c;
  c.vocab_size = 15;
  c.hidden_size = 8;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.max_position_embeddings = 32;
  c.num_labels = 2;
  c.id2label = {"neg", "pos"};
  return c;
}

ft::safetensors::TensorList tiny_weights() {
  ft::EncoderModel model(tiny_config());
  ft::safetensors::TensorList out;
  for (const auto& [name, t] : model.weights()) out.emplace_back(name, t.detach().clone());
  return out;
}

// A safetensors file taken apart: header JSON and data buffer.
struct StFile {
  json header;
  std::string data;
  std::string bytes() const {
    const std::string h = header.dump();
    std::string out(8, '\0');
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
    return out + h + data;
  }
};

StFile split(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return {json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

// Shared valid inputs every case starts from (absolute paths).
struct Base {
  fsys::path dir, vocab, train, config, ckpt;
  std::string weights;  // model.safetensors bytes of ckpt
};

Base make_base(const fsys::path& dir) {
  Base b;
  b.dir = dir;
  b.vocab = dir / "vocab.txt";
  b.train = dir / "train.jsonl";
  b.config = dir / "run.yaml";
  b.ckpt = dir / "ckpt";
  write(b.vocab, vocab_without(""));
  write(b.train, rows_jsonl());
  write(b.config, fmt::format(R"(model:
  config: tiny
data:
  train: {}
  labels: [neg, pos]
  vocab: {}
  dev_fraction: 0.25
  max_seq_len: 16
train:
  epochs: 1
  batch_size: 2
  max_steps: 1
strategy:
  name: single
runtime:
  threads: 1
  timeout_s: 10
)",
                              b.train.string(), b.vocab.string()));
  b.weights = ft::safetensors::serialize(tiny_weights(), {{"format", "pt"}});
  write(b.ckpt / "config.json", tiny_config().to_json());
  write(b.ckpt / "model.safetensors", b.weights);
  write(b.ckpt / "vocab.txt", vocab_without(""));
  return b;
}

// A copy of the base checkpoint in `dir`, with `weights` as its model file.
fsys::path ckpt_with(const Base& b, const fsys::path& dir, const std::string& weights) {
  fsys::copy(b.ckpt, dir, fsys::copy_options::recursive);
  write(dir / "model.safetensors", weights);
  return dir;
}

// ------------------------------------------------------------ the catalogue

struct Call {
  std::vector<std::string> args;
  std::vector<std::string> expect;  // all must appear in the error line
  std::map<std::string, std::string> env;
};

struct Case {
  const char* name;
  std::function<Call(const Base&, const fsys::path& dir)> prepare;
};

// `ft run` on the base config plus `extra`, with outputs pointed into `dir`.
std::vector<std::string> run_args(const Base& b, const fsys::path& dir, std::vector<std::string> extra) {
  std::vector<std::string> a{"run", "--config", b.config.string(), "--metrics-out", (dir / "metrics.jsonl").string(),
                             "--output-dir", (dir / "out").string()};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string plugin_dir(const char* which) { return (ft_test::binary_dir() / "test-plugins" / which).string(); }

std::vector<Case> catalogue() {
  using V = std::vector<std::string>;
  return {
      // ---- config
      {"config: unknown key", [](const Base& b, const fsys::path& d) {
         write(d / "c.yaml", ft_test::read_text(b.config) + "  warmup_ratoi: 0.1\n");
         return Call{V{"run", "--config", (d / "c.yaml").string(), "--output-dir", (d / "out").string()},
                     V{(d / "c.yaml").string(), "runtime.warmup_ratoi"}};
       }},
      {"config: wrong type", [](const Base& b, const fsys::path& d) {
         std::string y = ft_test::read_text(b.config);
         y.replace(y.find("batch_size: 2"), 13, "batch_size: [2]");
         write(d / "c.yaml", y);
         return Call{V{"run", "--config", (d / "c.yaml").string()}, V{(d / "c.yaml").string(), "train.batch_size"}};
       }},
      {"config: negative batch", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--set", "train.batch_size=-4"}), V{"train.batch_size", "-4"}};
       }},
      {"config: missing file", [](const Base&, const fsys::path& d) {
         return Call{V{"run", "--config", (d / "nope.yaml").string()}, V{(d / "nope.yaml").string(), "not found"}};
       }},
      {"config: --set without =", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--set", "train.lr"}), V{"--set train.lr", "key=value"}};
       }},
      {"config: YAML syntax error", [](const Base&, const fsys::path& d) {
         write(d / "c.yaml", "train:\n  lr: [1e-3\n");
         return Call{V{"run", "--config", (d / "c.yaml").string()}, V{(d / "c.yaml").string(), "YAML syntax error"}};
       }},
      {"config: flag value of the wrong type", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--nproc", "two"}), V{"--nproc", "two"}};
       }},
      {"config: negative --max-steps", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--max-steps", "-3"}), V{"train.max_steps", "-3"}};
       }},
      // ---- data
      {"data: empty file", [](const Base& b, const fsys::path& d) {
         write(d / "empty.jsonl", "");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "empty.jsonl").string()}),
                     V{(d / "empty.jsonl").string(), "empty"}};
       }},
      {"data: unknown label", [](const Base& b, const fsys::path& d) {
         write(d / "t.jsonl", rows_jsonl() + R"({"text": "a film", "label": "meh"})" "\n");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.jsonl").string()}),
                     V{(d / "t.jsonl").string(), "row 9", "unknown label 'meh'"}};
       }},
      {"data: non-UTF-8 bytes", [](const Base& b, const fsys::path& d) {
         write(d / "t.jsonl", rows_jsonl() + "{\"text\": \"caf\xe9 film\", \"label\": \"pos\"}\n");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.jsonl").string()}),
                     V{(d / "t.jsonl").string(), "row 9", "UTF-8"}};
       }},
      {"data: JSON list row not [text, label]", [](const Base& b, const fsys::path& d) {
         write(d / "t.json", R"([["the film was good", "pos"], ["only text"]])");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.json").string()}),
                     V{(d / "t.json").string(), "row 2", "expected [text, label]"}};
       }},
      {"data: JSON Lines row not an object", [](const Base& b, const fsys::path& d) {
         write(d / "t.jsonl", rows_jsonl() + "42\n");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.jsonl").string()}),
                     V{(d / "t.jsonl").string(), "row 9", "or an object"}};
       }},
      {"data: invalid JSON line", [](const Base& b, const fsys::path& d) {
         write(d / "t.jsonl", rows_jsonl() + "{\"text\": \"unterminated\n");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.jsonl").string()}),
                     V{(d / "t.jsonl").string(), "row 9", "invalid JSON"}};
       }},
      {"data: label nested 100000 deep", [](const Base& b, const fsys::path& d) {
         write(d / "t.jsonl", R"({"text": "a film", "label": )" + std::string(100000, '[') + std::string(100000, ']') +
                                  "}\n");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.jsonl").string()}),
                     V{(d / "t.jsonl").string(), "row 1", "a label list holds array"}};
       }},
      {"data: CSV without the label column", [](const Base& b, const fsys::path& d) {
         write(d / "t.csv", "text,stars\nthe film was good,5\n");
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.csv").string()}),
                     V{(d / "t.csv").string(), "no column 'label'"}};
       }},
      {"data: pre-tokenized label outside num_labels", [](const Base& b, const fsys::path& d) {
         auto ids = at::full({3, 4}, 5, at::kLong);
         ft::safetensors::save((d / "t.safetensors").string(),
                               {{"input_ids", ids}, {"attention_mask", at::ones({3, 4}, at::kLong)},
                                {"token_type_ids", at::zeros({3, 4}, at::kLong)},
                                {"labels", at::tensor(std::vector<int64_t>{0, 1, 5}, at::kLong)}});
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "t.safetensors").string()}),
                     V{(d / "t.safetensors").string(), "row 3", "label 5 is outside [0, 2)"}};
       }},
      {"data: missing file", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--set", "data.train=" + (d / "gone.jsonl").string()}),
                     V{(d / "gone.jsonl").string()}};
       }},
      // ---- vocab
      {"vocab: no [UNK]", [](const Base& b, const fsys::path& d) {
         write(d / "v.txt", vocab_without("[UNK]"));
         return Call{run_args(b, d, {"--set", "data.vocab=" + (d / "v.txt").string()}),
                     V{(d / "v.txt").string(), "[UNK]"}};
       }},
      {"vocab: no [CLS]", [](const Base& b, const fsys::path& d) {
         write(d / "v.txt", vocab_without("[CLS]"));
         return Call{run_args(b, d, {"--set", "data.vocab=" + (d / "v.txt").string()}),
                     V{(d / "v.txt").string(), "[CLS]"}};
       }},
      {"vocab: empty", [](const Base& b, const fsys::path& d) {
         write(d / "v.txt", "");
         return Call{run_args(b, d, {"--set", "data.vocab=" + (d / "v.txt").string()}),
                     V{(d / "v.txt").string(), "empty"}};
       }},
      {"vocab: missing file", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--set", "data.vocab=" + (d / "gone.txt").string()}),
                     V{(d / "gone.txt").string()}};
       }},
      {"vocab: build from data with no usable row", [](const Base& b, const fsys::path& d) {
         write(d / "t.jsonl", "{\"text\": 5, \"label\": \"pos\"}\n");
         return Call{V{"vocab", "build", "--config", b.config.string(), "--data", (d / "t.jsonl").string(), "--out",
                       (d / "vocab.txt").string()},
                     V{(d / "t.jsonl").string(), "no usable rows"}};
       }},
      {"vocab: does not match the checkpoint", [](const Base& b, const fsys::path& d) {
         write(d / "v.txt", vocab_without("") + "extra\n");
         return Call{run_args(b, d, {"--set", "model.config=" + b.ckpt.string(), "--set",
                                     "data.vocab=" + (d / "v.txt").string()}),
                     V{(d / "v.txt").string(), "16 tokens", "vocab_size is 15"}};
       }},
      // ---- checkpoints
      {"checkpoint: truncated safetensors (predict)", [](const Base& b, const fsys::path& d) {
         const auto ck = ckpt_with(b, d / "ck", b.weights.substr(0, b.weights.size() / 2));
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"},
                     V{(ck / "model.safetensors").string(), "truncated"}};
       }},
      {"checkpoint: header length past the end (eval)", [](const Base& b, const fsys::path& d) {
         std::string w = b.weights;
         uint64_t n = w.size();  // under the 100 MB header limit, past the end
         for (int i = 0; i < 8; ++i, n >>= 8) w[i] = static_cast<char>(n & 0xff);
         const auto ck = ckpt_with(b, d / "ck", w);
         return Call{V{"eval", "--config", b.config.string(), "--checkpoint", ck.string()},
                     V{(ck / "model.safetensors").string(), "header length", "past the end of the file"}};
       }},
      {"checkpoint: header is not JSON (predict)", [](const Base& b, const fsys::path& d) {
         std::string w = b.weights;
         w[8] = '[';
         w[9] = '[';
         const auto ck = ckpt_with(b, d / "ck", w);
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"},
                     V{(ck / "model.safetensors").string(), "not valid JSON"}};
       }},
      {"checkpoint: header nested 100000 deep (predict)", [](const Base& b, const fsys::path& d) {
         const std::string header = R"({"a":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
         std::string w(8, '\0');
         uint64_t n = header.size();
         for (int i = 0; i < 8; ++i, n >>= 8) w[i] = static_cast<char>(n & 0xff);
         const auto ck = ckpt_with(b, d / "ck", w + header);
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"},
                     V{(ck / "model.safetensors").string(), "tensor 'a'", "deeply nested"}};
       }},
      {"checkpoint: tensor name with a line break (eval)", [](const Base& b, const fsys::path& d) {
         StFile f = split(b.weights);
         f.header["evil\nname"] = {{"dtype", "Q8"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
         const auto ck = ckpt_with(b, d / "ck", f.bytes());
         return Call{V{"eval", "--config", b.config.string(), "--checkpoint", ck.string()},
                     V{(ck / "model.safetensors").string(), "tensor 'evil\\nname'", "unknown dtype 'Q8'"}};
       }},
      {"checkpoint: overlapping offsets (run)", [](const Base& b, const fsys::path& d) {
         StFile f = split(b.weights);
         // query.bias lies after key.bias (by name): the overlap comes before the hole it leaves.
         f.header["bert.encoder.layer.0.attention.self.query.bias"]["data_offsets"] =
             f.header["bert.encoder.layer.0.attention.self.key.bias"]["data_offsets"];
         const auto ck = ckpt_with(b, d / "ck", f.bytes());
         return Call{run_args(b, d, {"--set", "model.config=" + ck.string()}),
                     V{(ck / "model.safetensors").string(), "overlap"}};
       }},
      {"checkpoint: dtype does not fit config.json (predict)", [](const Base& b, const fsys::path& d) {
         StFile f = split(b.weights);
         f.header["classifier.weight"]["dtype"] = "I32";  // same size, not a float
         const auto ck = ckpt_with(b, d / "ck", f.bytes());
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"},
                     V{(ck / "model.safetensors").string(), "classifier.weight", "dtype Int"}};
       }},
      {"checkpoint: shape does not fit config.json (run)", [](const Base& b, const fsys::path& d) {
         const auto ck = ckpt_with(b, d / "ck", b.weights);
         auto c = tiny_config();
         c.intermediate_size = 32;
         write(ck / "config.json", c.to_json());
         return Call{run_args(b, d, {"--set", "model.config=" + ck.string()}),
                     V{ck.string(), "intermediate.dense.weight", "config.json implies 32x8"}};
       }},
      {"checkpoint: missing tensor (eval)", [](const Base& b, const fsys::path& d) {
         auto w = tiny_weights();
         w.erase(std::remove_if(w.begin(), w.end(), [](const auto& p) { return p.first == "classifier.bias"; }),
                 w.end());
         const auto ck = ckpt_with(b, d / "ck", ft::safetensors::serialize(w));
         return Call{V{"eval", "--config", b.config.string(), "--checkpoint", ck.string()},
                     V{ck.string(), "missing tensor 'classifier.bias'"}};
       }},
      {"checkpoint: unexpected tensor (predict)", [](const Base& b, const fsys::path& d) {
         auto w = tiny_weights();
         w.emplace_back("head.extra", at::zeros({2}));
         const auto ck = ckpt_with(b, d / "ck", ft::safetensors::serialize(w));
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"},
                     V{(ck / "model.safetensors").string(), "unexpected tensor 'head.extra'"}};
       }},
      {"checkpoint: missing config.json (predict)", [](const Base& b, const fsys::path& d) {
         const auto ck = ckpt_with(b, d / "ck", b.weights);
         fsys::remove(ck / "config.json");
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"}, V{(ck / "config.json").string()}};
       }},
      {"checkpoint: garbage config.json (run)", [](const Base& b, const fsys::path& d) {
         const auto ck = ckpt_with(b, d / "ck", b.weights);
         write(ck / "config.json", "{\"hidden_size\": 8,, }");
         return Call{run_args(b, d, {"--set", "model.config=" + ck.string()}),
                     V{(ck / "config.json").string(), "not valid JSON"}};
       }},
      {"checkpoint: config.json nested 100000 deep (predict)", [](const Base& b, const fsys::path& d) {
         const auto ck = ckpt_with(b, d / "ck", b.weights);
         write(ck / "config.json", R"({"hidden_size": 8, "notes": )" + std::string(100000, '[') +
                                       std::string(100000, ']') + "}");
         return Call{V{"predict", "--checkpoint", ck.string(), "a good film"},
                     V{(ck / "config.json").string(), "nested"}};
       }},
      {"checkpoint: not a directory (eval)", [](const Base& b, const fsys::path& d) {
         write(d / "ck", "x");
         return Call{V{"eval", "--config", b.config.string(), "--checkpoint", (d / "ck").string()},
                     V{(d / "ck").string(), "not a directory"}};
       }},
      {"checkpoint: resume from a model-only export", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--resume", b.ckpt.string()}), V{b.ckpt.string(), "training_state"}};
       }},
      // ---- plugins
      {"plugins: wrong ABI version", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--plugin-dir", plugin_dir("wrong_abi"), "--strategy", "test_wrong_abi"}),
                     V{"libft_strategy_wrong_abi.so", "ABI version"}};
       }},
      {"plugins: not a shared library", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--plugin-dir", plugin_dir("not_a_library"), "--strategy", "bogus"}),
                     V{"libft_strategy_bogus.so", "not a loadable shared library"}};
       }},
      {"plugins: no entry symbol", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--plugin-dir", plugin_dir("no_entry"), "--strategy", "no_entry"}),
                     V{"libft_strategy_no_entry.so", "entry symbol"}};
       }},
      {"plugins: --plugin-dir is not a directory", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--plugin-dir", (d / "nodir").string()}), V{(d / "nodir").string()}};
       }},
      {"plugins: symlink out of the plugin directory", [](const Base& b, const fsys::path& d) {
         fsys::create_directories(d / "plugins");
         fsys::create_symlink(fsys::path(plugin_dir("good")) / "libft_strategy_good.so",
                              d / "plugins" / "libft_strategy_good.so");
         return Call{run_args(b, d, {"--plugin-dir", (d / "plugins").string(), "--strategy", "test_alpha"}),
                     V{"libft_strategy_good.so", "outside"}};
       }},
      // ---- launch
      {"launch: --nproc 0", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--nproc", "0"}), V{"--nproc 0"}};
       }},
      {"launch: negative --timeout", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--nproc", "2", "--timeout", "-1"}), V{"runtime.timeout_s", "-1"}};
       }},
      {"launch: --node-rank beyond --nnodes", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--nnodes", "2", "--node-rank", "2", "--master-port", "29123"}),
                     V{"--node-rank 2"}};
       }},
      {"launch: --master-port out of range", [](const Base& b, const fsys::path& d) {
         return Call{run_args(b, d, {"--nproc", "2", "--master-port", "70000"}), V{"--master-port 70000"}};
       }},
      {"launch: unreachable master", [](const Base& b, const fsys::path& d) {
         // 192.0.2.0/24 is TEST-NET-1: never routed.
         return Call{run_args(b, d, {"--nnodes", "2", "--node-rank", "1", "--master-addr", "192.0.2.1",
                                     "--master-port", "29124", "--timeout", "1"}),
                     V{"rank 1", "192.0.2.1:29124"}};
       }},
  };
}

// A listening socket on 127.0.0.1:port for as long as it lives.
struct PortHog {
  int fd = -1;
  int port = 0;
  PortHog() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    REQUIRE(::listen(fd, 8) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    port = ntohs(sa.sin_port);
  }
  ~PortHog() { ::close(fd); }
};

// One case, prepared and snapshotted; run() may happen on another thread.
struct Prepared {
  std::string name;
  fsys::path dir, logs;
  Call call;
  std::map<std::string, std::string> before;
  ft_test::SandboxRun outcome;
};

Prepared prepare(const Case& c, const Base& base, const fsys::path& root, int index) {
  Prepared p;
  p.name = c.name;
  p.dir = root / fmt::format("case-{:02}", index);
  p.logs = root / fmt::format("logs-{:02}", index);
  fsys::create_directories(p.dir);
  fsys::create_directories(p.logs);
  p.call = c.prepare(base, p.dir);
  p.before = ft_test::snapshot(p.dir);
  return p;
}

// The only things a failing run may print on stdout: the startup line and
// the notes printed with it (a strategy chosen for --nproc), eval's line
// naming what it evaluates.
bool allowed_on_stdout(const std::string& line) {
  return (line.find(" train / ") != std::string::npos && line.find(" dev rows") != std::string::npos) ||
         line.find(" processes and no --strategy: using ddp") != std::string::npos ||
         line.rfind("evaluating checkpoint ", 0) == 0;
}

void check(const Prepared& p) {
  const ft_test::SandboxRun& r = p.outcome;
  if (std::getenv("FT_SHOW_ERRORS")) MESSAGE(p.name << "\n" << r.err);  // to review the messages
  INFO("case: " << p.name << "\nargs: " << fmt::format("{}", fmt::join(p.call.args, " ")) << "\nstderr:\n"
                << r.err << "stdout:\n" << r.out);
  CHECK_MESSAGE(r.exited, "ended by " << r.how);
  CHECK(r.code != 0);
  CHECK_FALSE(r.left_processes);
  // One "ft: error:" line is all of stderr, holding every expected piece;
  // in a launched job (`--nproc`/`--nnodes`) it is the launcher's, naming
  // the rank ("ft: error: rank N: ..."), and no worker adds its own.
  const auto lines = ft_test::lines_of(r.err);
  CHECK_MESSAGE(lines.size() == 1, "want exactly one line on stderr, got " << lines.size());
  if (!lines.empty()) {
    const std::string& l = lines.front();
    CHECK_MESSAGE(l.rfind("ft: error: ", 0) == 0, "not an error line: " << l);
    for (const auto& want : p.call.expect) CHECK_MESSAGE(l.find(want) != std::string::npos, "missing '" << want << "'");
  }
  for (const auto& l : ft_test::lines_of(r.out)) CHECK_MESSAGE(allowed_on_stdout(l), "output on stdout: " << l);
  const std::string changed = ft_test::snapshot_diff(p.before, ft_test::snapshot(p.dir));
  CHECK_MESSAGE(changed.empty(), "left behind:\n" << changed);
}

// Runs the cases `jobs` at a time (each is mostly LibTorch's start-up).
void run_all(std::vector<Prepared>& cases, unsigned jobs) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned j = 0; j < jobs; ++j) {
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < cases.size();) {
        cases[i].outcome = ft_test::run_sandboxed(cases[i].dir, cases[i].call.args, cases[i].call.env, cases[i].logs);
      }
    });
  }
  for (auto& t : pool) t.join();
}

// The whole catalogue, prepared and run once, two cases at a time. doctest
// enters a test case again for each of its subcases: the runs are kept from
// the first entry so that every subcase checks its own case without running
// ~46 processes again (a subcase picked alone with -sc still runs them all).
struct CatalogueRun {
  ft_test::TempDir root{"bad-input"};
  Base base;
  std::vector<Prepared> cases;
  std::map<std::string, std::string> base_before;  // snapshot of the shared inputs

  CatalogueRun() {
    for (const char* p : {"wrong_abi", "not_a_library", "no_entry", "good"}) {
      INFO("test plugin dir " << plugin_dir(p) << " (build the test plugins)");
      REQUIRE(fsys::is_directory(plugin_dir(p)));
    }
    base = make_base(root.path() / "base");
    const auto all = catalogue();
    for (size_t i = 0; i < all.size(); ++i) cases.push_back(prepare(all[i], base, root.path(), static_cast<int>(i)));
    base_before = ft_test::snapshot(base.dir);
    run_all(cases, 2);
  }
};

const CatalogueRun& catalogue_run() {
  static const CatalogueRun run;
  return run;
}

}  // namespace

TEST_CASE("bad input catalogue: one clear line, non-zero exit, nothing left behind") {
  const CatalogueRun& run = catalogue_run();
  SUBCASE("the catalogue: at least 36 cases, each with a name of its own") {
    CHECK(run.cases.size() >= 36);
    // doctest runs only the first of several subcases with one name.
    std::set<std::string> names;
    for (const auto& p : run.cases) CHECK_MESSAGE(names.insert(p.name).second, "two cases are named '" << p.name << "'");
  }
  for (const auto& p : run.cases) {
    SUBCASE(p.name.c_str()) { check(p); }
  }
  SUBCASE("the shared inputs are unchanged") {
    CHECK_MESSAGE(ft_test::snapshot_diff(run.base_before, ft_test::snapshot(run.base.dir)).empty(),
                  "the shared inputs changed");
  }
}

TEST_CASE("bad input: the rendezvous port already in use") {
  ft_test::TempDir root("bad-input-port");
  const Base base = make_base(root.path() / "base");
  PortHog hog;
  const Case c{"launch: port in use", [&](const Base& b, const fsys::path& d) {
                 return Call{run_args(b, d, {"--nproc", "2", "--master-port", std::to_string(hog.port), "--timeout", "5"}),
                             {fmt::format("master port {} on 127.0.0.1 is in use", hog.port)}};
               }};
  std::vector<Prepared> one{prepare(c, base, root.path(), 0)};
  run_all(one, 1);
  check(one[0]);
}
