// Text data readers, bad-row policy, label inference, train/dev split,
// text and tensor datasets (collate), and the real Weibo / parity-tiny data.
#include <algorithm>
#include <fstream>
#include <numeric>
#include <map>

#include <ATen/ATen.h>

#include "ft/data/data.h"
#include "ft/base/error.h"
#include "ft/io/safetensors.h"
#include "ft/data/sampler.h"
#include "ft/tokenizer/tokenizer.h"
#include "ft_test.h"

namespace {

std::string write(const ft_test::TempDir& dir, const std::string& name, const std::string& bytes) {
  const auto path = (dir.path() / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

ft::DataSource source(const std::string& path) {
  ft::DataSource s;
  s.path = path;
  return s;
}

// The ft::Error message of reading `s`, or "" when it reads fine.
std::string read_error(const ft::DataSource& s) {
  try {
    ft::read_text_data(s);
  } catch (const ft::Error& e) {
    return e.what();
  }
  return "";
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::vector<int64_t> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

std::vector<std::string> texts(const ft::TextData& d) {
  std::vector<std::string> out;
  for (const auto& r : d.rows) out.push_back(r.text);
  return out;
}

std::vector<int64_t> labels(const ft::TextData& d) {
  std::vector<int64_t> out;
  for (const auto& r : d.rows) out.push_back(r.label);
  return out;
}

}  // namespace

TEST_CASE("JSON list of [text, label]: integer labels infer names 0..max") {
  ft_test::TempDir dir("data-json");
  const auto path = write(dir, "d.json", R"([["a b c", 2], ["", 0],
    ["你 好", 2]])");
  auto s = source(path);
  s.strip_spaces = true;
  const auto d = ft::read_text_data(s);
  CHECK(texts(d) == std::vector<std::string>{"abc", "", "你好"});
  CHECK(labels(d) == std::vector<int64_t>{2, 0, 2});
  CHECK(d.label_names == std::vector<std::string>{"0", "1", "2"});
  CHECK(d.skipped == 0);
  CHECK(d.source == path);
}

TEST_CASE("JSON list of objects and JSON Lines: fields, pairs, names sorted") {
  ft_test::TempDir dir("data-obj");
  const auto path = write(dir, "d.json",
                          R"([{"s": "x", "y": "pos"}, {"s": "y", "y": "neg", "extra": 1},
                              {"s": "z", "y": "pos"}])");
  auto s = source(path);
  s.text_field = "s";
  s.label_field = "y";
  const auto d = ft::read_text_data(s);
  CHECK(d.label_names == std::vector<std::string>{"neg", "pos"});
  CHECK(labels(d) == std::vector<int64_t>{1, 0, 1});

  const auto jl = write(dir, "p.jsonl",
                        "{\"q\": \"a\", \"p\": \"b\", \"label\": 1}\r\n\n"
                        "{\"q\": \"c\", \"p\": \"d\", \"label\": \"0\"}\n");
  auto sj = source(jl);
  sj.text_field = "q";
  sj.pair_field = "p";
  sj.label_names = {"no", "yes"};
  const auto dj = ft::read_text_data(sj);
  REQUIRE(dj.rows.size() == 2u);
  CHECK(dj.rows[0].text == "a");
  CHECK(dj.rows[0].pair == "b");
  CHECK(dj.rows[1].pair == "d");
  CHECK(labels(dj) == std::vector<int64_t>{1, 0});  // "0" is not a name: an id
  CHECK(dj.label_names == std::vector<std::string>{"no", "yes"});
}

TEST_CASE("CSV (RFC 4180) and TSV") {
  ft_test::TempDir dir("data-csv");
  const auto path = write(dir, "d.csv",
                          "id,text,label\r\n"
                          "1,plain,pos\r\n"
                          "2,\"with, comma\",neg\r\n"
                          "3,\"two\nlines and \"\"quotes\"\"\",pos\r\n"
                          "\r\n"
                          "4,last, neg \r\n");
  const auto d = ft::read_text_data(source(path));
  CHECK(texts(d) ==
        std::vector<std::string>{"plain", "with, comma", "two\nlines and \"quotes\"", "last"});
  CHECK(labels(d) == std::vector<int64_t>{1, 0, 1, 0});
  CHECK(d.label_names == std::vector<std::string>{"neg", "pos"});

  // A record that spans lines 2-3 pushes the bad row to line 4.
  const auto bad = write(dir, "bad.csv", "text,label\n\"a\nb\",1\nonly-one-field\n");
  CHECK(read_error(source(bad)) ==
        bad + ": row 4: has 1 fields but the header has 2; fix or remove the row, or skip bad "
              "rows (data.bad_rows: skip)");
  const auto quote = write(dir, "q.csv", "text,label\n\"a\"x,1\nb,0\n");
  CHECK(starts_with(read_error(source(quote)),
                    quote + ": row 2: unexpected character after a closing quote"));
  auto skip = source(quote);
  skip.bad_rows = ft::BadRows::Skip;
  const auto ds = ft::read_text_data(skip);
  CHECK(texts(ds) == std::vector<std::string>{"b"});
  CHECK(ds.skipped == 1);
  const auto nocol = write(dir, "n.csv", "sentence,label\na,1\n");
  CHECK(starts_with(read_error(source(nocol)),
                    nocol + ": the header row has no column 'text' (columns: sentence, label)"));

  const auto tsv = write(dir, "d.tsv", "label\ttext\n1\ta \"quoted\" text\n0\t\n");
  const auto dt = ft::read_text_data(source(tsv));
  CHECK(texts(dt) == std::vector<std::string>{"a \"quoted\" text", ""});
  CHECK(labels(dt) == std::vector<int64_t>{1, 0});
}

TEST_CASE("bad rows name the file and the row; Skip counts them") {
  ft_test::TempDir dir("data-bad");
  struct Case {
    std::string name, bytes, expected;  // expected: the message after "<file>: "
    std::vector<std::string> label_names;
  };
  const std::vector<Case> cases = {
      {"type.json", R"([["ok", 0], [5, 1]])", "row 2: text is number (5), expected a string", {}},
      {"shape.json", R"([["ok", 0], ["a", 1], ["x"]])",
       "row 3: expected [text, label] or [text, pair, label], got 1 items", {}},
      {"scalar.json", R"([["ok", 0], 7])", "row 2: expected [text, label] or an object, got number",
       {}},
      {"unknown.json", R"([["a", "pos"], ["b", "joy"]])",
       "row 2: unknown label 'joy' (label names: neg, pos)", {"neg", "pos"}},
      {"range.json", R"([["a", 1], ["b", 2]])",
       "row 2: label id 2 is outside [0, 2) (2 label names given)", {"neg", "pos"}},
      {"negative.json", R"([["a", 1], ["b", -1]])", "row 2: negative label id -1", {}},
      {"mixed.json", R"([["a", 1], ["b", "pos"]])",
       "row 2: label 'pos' is a name but earlier rows use integer ids", {}},
      {"labeltype.json", R"([["a", true]])", "row 1: label is boolean (true)", {}},
      // A fraction makes the labels regression scores (as transformers infers): a name is then bad.
      {"float.json", R"([["a", 1.5], ["b", "pos"]])", "row 2: regression label 'pos' is not a number", {}},
      {"utf8.json", "[[\"ok\", 0], [\"bad \xFF byte\", 1]]", "row 2: invalid UTF-8 (byte 0xFF)",
       {}},
      {"missing.jsonl", "{\"text\": \"a\", \"label\": 0}\n\n{\"text\": \"b\"}\n",
       "row 3: missing field 'label'", {}},
      {"syntax.jsonl", "{\"text\": \"a\", \"label\": 0}\n{\"text\": \"b\", \"label\": }\n",
       "row 2: invalid JSON", {}},
      {"utf8.tsv", "text\tlabel\nok\t0\n\xC3\x28\t1\n", "row 3: invalid UTF-8 (byte 0xC3)", {}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto s = source(write(dir, c.name, c.bytes));
    s.label_names = c.label_names;
    const std::string msg = read_error(s);
    CHECK(starts_with(msg, s.path + ": " + c.expected));
    CHECK(msg.find('\n') == std::string::npos);
    // Skip: the bad row is counted, the good ones kept.
    s.bad_rows = ft::BadRows::Skip;
    if (c.name == "labeltype.json") {
      CHECK_THROWS_WITH_AS(ft::read_text_data(s), doctest::Contains("no usable rows (1 bad rows"),
                           ft::Error);
      continue;
    }
    const auto d = ft::read_text_data(s);
    CHECK(d.skipped == 1);
    REQUIRE(d.skip_notes.size() == 1u);
    CHECK(starts_with(d.skip_notes[0], s.path + ": " + c.expected));
  }

  const auto many = write(dir, "many.json", R"([["a", 0], [1, 0], ["b", 1], ["c"], ["d", 0]])");
  auto s = source(many);
  s.bad_rows = ft::BadRows::Skip;
  const auto d = ft::read_text_data(s);
  CHECK(texts(d) == std::vector<std::string>{"a", "b", "d"});
  CHECK(d.skipped == 2);
}

TEST_CASE("whole-file problems name the file") {
  ft_test::TempDir dir("data-file");
  const auto empty = write(dir, "e.json", "  \n");
  CHECK(read_error(source(empty)) ==
        empty + ": the file is empty; give a data file with at least one example");
  const auto none = write(dir, "n.json", "[ ]");
  CHECK(starts_with(read_error(source(none)), none + ": the file has no rows"));
  const auto header_only = write(dir, "h.csv", "text,label\n");
  CHECK(starts_with(read_error(source(header_only)), header_only + ": the file has no rows"));
  const auto open = write(dir, "o.json", R"([["a", 0], ["b", 1])");
  CHECK(starts_with(read_error(source(open)), open + ": the JSON list is not closed"));
  const auto tail = write(dir, "t.json", "[[\"a\", 0]]\n]");
  CHECK(starts_with(read_error(source(tail)),
                    tail + ": unexpected text after the JSON list's closing ']' (line 2)"));
  const auto object = write(dir, "obj.json", R"({"text": "a", "label": 0})");
  CHECK(starts_with(read_error(source(object)), object + ": expected a JSON list"));
  CHECK(starts_with(read_error(source((dir.path() / "absent.json").string())),
                    (dir.path() / "absent.json").string() + ": cannot open the data file"));
  const auto st = write(dir, "x.safetensors", "");
  CHECK(starts_with(read_error(source(st)), st + ": pre-tokenized safetensors data"));
}

TEST_CASE("format detection and names") {
  ft_test::TempDir dir("data-fmt");
  CHECK(ft::detect_data_format("a/b.JSON") == ft::DataFormat::JsonList);
  CHECK(ft::detect_data_format("x.ndjson") == ft::DataFormat::JsonLines);
  CHECK(ft::detect_data_format("x.tab") == ft::DataFormat::Tsv);
  CHECK(ft::detect_data_format("x.csv", ft::DataFormat::Tsv) == ft::DataFormat::Tsv);
  CHECK(ft::detect_data_format("d.safetensors") == ft::DataFormat::Safetensors);
  CHECK(ft::detect_data_format(write(dir, "rows.txt", "\n {\"text\":\"a\",\"label\":0}")) ==
        ft::DataFormat::JsonLines);
  CHECK(ft::detect_data_format(write(dir, "list", " [[\"a\",0]]")) == ft::DataFormat::JsonList);
  CHECK_THROWS_WITH_AS(ft::detect_data_format(write(dir, "x.dat", "text,label")),
                       doctest::Contains("set data.format"), ft::Error);
  CHECK(ft::parse_data_format("jsonl") == ft::DataFormat::JsonLines);
  CHECK(ft::to_string(ft::DataFormat::Csv) == "csv");
  CHECK_THROWS_WITH_AS(ft::parse_data_format("xml"),
                       doctest::Contains("use one of auto, json, jsonl, csv, tsv, safetensors"),
                       ft::Error);
}

TEST_CASE("max_rows: first N, or N drawn with a seed in file order") {
  ft_test::TempDir dir("data-max");
  const auto path = write(dir, "d.json", R"([["r0",0],["r1",1],["r2",0],["r3",1],["r4",0]])");
  auto s = source(path);
  s.max_rows = 3;
  CHECK(texts(ft::read_text_data(s)) == std::vector<std::string>{"r0", "r1", "r2"});
  s.take = ft::Take::Random;
  s.take_seed = 42;
  // The first 3 of seeded_permutation(5, 42), back in file order.
  auto perm = ft::seeded_permutation(5, 42);
  perm.resize(3);
  std::sort(perm.begin(), perm.end());
  std::vector<std::string> want;
  for (int64_t i : perm) want.push_back("r" + std::to_string(i));
  const auto d = ft::read_text_data(s);
  CHECK(texts(d) == want);
  CHECK(texts(d) != std::vector<std::string>{"r0", "r1", "r2"});
}

TEST_CASE("split_train_dev: seeded, deterministic, dev = the last rows") {
  ft::TextData all;
  all.label_names = {"0"};
  all.source = "mem";
  for (int i = 0; i < 10; ++i) all.rows.push_back({"t" + std::to_string(i), "", 0});
  // seeded_permutation(10, 42) = 1 7 9 0 3 8 4 2 5 6 (pinned in test_sampler).
  auto [train, dev] = ft::split_train_dev(all, 0.3, 42);
  CHECK(texts(train) == std::vector<std::string>{"t1", "t7", "t9", "t0", "t3", "t8", "t4"});
  CHECK(texts(dev) == std::vector<std::string>{"t2", "t5", "t6"});
  CHECK(dev.label_names == all.label_names);
  auto [train2, dev2] = ft::split_train_dev(all, 0.3, 42);
  CHECK(texts(dev2) == texts(dev));
  auto [train3, dev3] = ft::split_train_dev(all, 0.3, 43);
  CHECK(texts(train3) != texts(train));
  auto [train4, dev4] = ft::split_train_dev(all, 0.25, 1, false);  // round(2.5) = 3
  CHECK(texts(dev4) == std::vector<std::string>{"t7", "t8", "t9"});
  CHECK(train4.rows.size() == 7u);
  auto [train5, dev5] = ft::split_train_dev(all, 0.0, 1);
  CHECK(dev5.rows.empty());
  CHECK(train5.rows.size() == 10u);
  CHECK_THROWS_WITH_AS(ft::split_train_dev(all, 1.0, 1), doctest::Contains("dev_fraction"),
                       ft::Error);
}

TEST_CASE("text dataset: tokenizes in collate, pads longest or to max_length") {
  auto tok = std::make_shared<const ft::WordPieceTokenizer>(ft::WordPieceTokenizer::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "##s", "a", "b"}));
  ft::TextData data;
  data.label_names = {"x", "y", "z"};
  data.source = "mem";
  data.rows = {{"hello worlds", "", 2}, {"a", "", 0}, {"b a zzz", "", 1}};
  auto longest = ft::make_text_dataset(data, tok, 8, ft::Padding::Longest);
  CHECK(longest->size() == 3);
  CHECK(longest->num_labels() == 3);
  CHECK(longest->labels() == std::vector<int64_t>{2, 0, 1});
  const ft::Batch b = longest->collate({1, 0});
  CHECK(b.input_ids.sizes().vec() == std::vector<int64_t>{2, 5});
  CHECK((b.input_ids.scalar_type() == at::kLong));
  CHECK(values(b.input_ids) == std::vector<int64_t>{2, 7, 3, 0, 0, 2, 4, 5, 6, 3});
  CHECK(values(b.attention_mask) == std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 1});
  CHECK(values(b.token_type_ids) == std::vector<int64_t>(10, 0));
  CHECK(values(b.labels) == std::vector<int64_t>{0, 2});

  auto fixed = ft::make_text_dataset(data, tok, 4, ft::Padding::MaxLength);
  const ft::Batch f = fixed->collate({2, 1});
  CHECK(f.input_ids.sizes().vec() == std::vector<int64_t>{2, 4});
  // "b a zzz" truncated to 4: [CLS] b a [SEP]; zzz would be [UNK].
  CHECK(values(f.input_ids) == std::vector<int64_t>{2, 8, 7, 3, 2, 7, 3, 0});
  CHECK(values(f.attention_mask) == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 0});
  CHECK_THROWS_AS(fixed->collate({3}), ft::Error);

  ft::TextData pairs = data;
  pairs.rows = {{"a", "b", 1}, {"hello", "", 0}};
  auto pd = ft::make_text_dataset(pairs, tok, 8, ft::Padding::Longest);
  const ft::Batch p = pd->collate({0, 1});
  CHECK(values(p.input_ids) == std::vector<int64_t>{2, 7, 3, 8, 3, 2, 4, 3, 3, 0});
  // The empty second text still gets its [SEP] in segment 1 (as HF).
  CHECK(values(p.token_type_ids) == std::vector<int64_t>{0, 0, 0, 1, 1, 0, 0, 0, 1, 0});
  CHECK_THROWS_WITH_AS(ft::make_text_dataset(pairs, tok, 2, ft::Padding::Longest),
                       doctest::Contains("at least 3"), ft::Error);
}

TEST_CASE("tensor dataset: validation and trimming of all-pad columns") {
  ft_test::TempDir dir("data-tensor");
  auto i64 = [](std::vector<int64_t> v, std::vector<int64_t> shape) {
    return at::from_blob(v.data(), shape, at::kLong).clone();
  };
  const at::Tensor ids = i64({5, 6, 7, 0, 8, 9, 0, 0, 4, 0, 0, 0}, {3, 4});
  const at::Tensor mask = i64({1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0, 0}, {3, 4});
  const at::Tensor types = i64({0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}, {3, 4});
  const at::Tensor labels = i64({1, 0, 2}, {3});
  const auto path = (dir.path() / "d.safetensors").string();
  ft::safetensors::save(path, {{"input_ids", ids},
                               {"attention_mask", mask},
                               {"token_type_ids", types},
                               {"labels", labels}});
  auto longest = ft::load_tensor_dataset(path, 3, ft::Padding::Longest);
  CHECK(longest->size() == 3);
  CHECK(longest->labels() == std::vector<int64_t>{1, 0, 2});
  const ft::Batch b = longest->collate({2, 1});
  CHECK(b.input_ids.sizes().vec() == std::vector<int64_t>{2, 2});
  CHECK(values(b.input_ids) == std::vector<int64_t>{4, 0, 8, 9});
  CHECK(values(b.attention_mask) == std::vector<int64_t>{1, 0, 1, 1});
  CHECK(values(b.token_type_ids) == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(values(b.labels) == std::vector<int64_t>{2, 0});
  CHECK(longest->collate({0, 2}).input_ids.size(1) == 3);
  auto full = ft::load_tensor_dataset(path, 3, ft::Padding::MaxLength);
  CHECK(full->collate({2}).input_ids.sizes().vec() == std::vector<int64_t>{1, 4});
  CHECK(ft::load_tensor_dataset(path, 0, ft::Padding::Longest)->num_labels() == 3);
  CHECK(ft::load_tensor_dataset(path, 3, ft::Padding::Longest, 2)->size() == 2);
  CHECK_THROWS_WITH_AS(ft::load_tensor_dataset(path, 2, ft::Padding::Longest),
                       doctest::Contains((path + ": tensor 'labels' row 3: label 2 is outside [0, 2)").c_str()),
                       ft::Error);

  const auto missing = (dir.path() / "m.safetensors").string();
  ft::safetensors::save(missing, {{"input_ids", ids}, {"attention_mask", mask}, {"labels", labels}});
  CHECK_THROWS_WITH_AS(ft::load_tensor_dataset(missing, 3, ft::Padding::Longest),
                       doctest::Contains((missing + ": no tensor 'token_type_ids'").c_str()), ft::Error);
  const auto dtype = (dir.path() / "f.safetensors").string();
  ft::safetensors::save(dtype, {{"input_ids", ids},
                                {"attention_mask", mask.to(at::kFloat)},
                                {"token_type_ids", types},
                                {"labels", labels}});
  CHECK_THROWS_WITH_AS(ft::load_tensor_dataset(dtype, 3, ft::Padding::Longest),
                       doctest::Contains((dtype + ": tensor 'attention_mask' has dtype F32").c_str()),
                       ft::Error);
  const auto shape = (dir.path() / "s.safetensors").string();
  ft::safetensors::save(shape, {{"input_ids", ids},
                                {"attention_mask", mask.narrow(1, 0, 3).contiguous()},
                                {"token_type_ids", types},
                                {"labels", labels}});
  CHECK_THROWS_WITH_AS(ft::load_tensor_dataset(shape, 3, ft::Padding::Longest),
                       doctest::Contains((shape + ": tensor 'attention_mask' has shape [3, 3] but "
                                                  "input_ids has [3, 4]").c_str()),
                       ft::Error);
}

TEST_CASE("parity-tiny data.safetensors: 256 x 64, first global batch") {
  FT_REQUIRE_SHARED("fixtures/parity-tiny/data.safetensors");
  const auto path = (ft_test::shared_dir() / "fixtures/parity-tiny/data.safetensors").string();
  auto d = ft::load_tensor_dataset(path, 6, ft::Padding::MaxLength);
  REQUIRE(d->size() == 256);
  const auto labels = d->labels();
  CHECK(std::accumulate(labels.begin(), labels.end(), int64_t{0}) == 660);
  std::vector<int64_t> first(32);
  std::iota(first.begin(), first.end(), int64_t{0});
  const ft::Batch b = d->collate(first);
  CHECK(b.input_ids.sizes().vec() == std::vector<int64_t>{32, 64});
  CHECK(b.attention_mask.sum().item<int64_t>() == 1274);
  CHECK(values(b.input_ids[0].narrow(0, 0, 4)) == std::vector<int64_t>{101, 11345, 2171, 1196});
  CHECK(values(b.labels.narrow(0, 0, 8)) == std::vector<int64_t>{3, 5, 0, 2, 1, 1, 1, 1});
  // Longest: the longest of the first 32 rows has 60 tokens.
  auto l = ft::load_tensor_dataset(path, 6, ft::Padding::Longest);
  CHECK(l->collate(first).input_ids.sizes().vec() == std::vector<int64_t>{32, 60});
  CHECK(at::equal(l->collate(first).input_ids, b.input_ids.narrow(1, 0, 60)));
}

TEST_CASE("Weibo emotion data: 40 133 rows, seeds' 9 200 / 800 split") {
  FT_REQUIRE_SHARED("data/weibo-emotion/train.json");
  auto s = source((ft_test::shared_dir() / "data/weibo-emotion/train.json").string());
  s.strip_spaces = true;
  const auto all = ft::read_text_data(s);
  REQUIRE(all.rows.size() == 40133u);
  CHECK(all.label_names == std::vector<std::string>{"0", "1", "2", "3", "4", "5"});
  std::vector<int64_t> hist(6, 0);
  for (const auto& r : all.rows) ++hist[static_cast<size_t>(r.label)];
  CHECK(hist == std::vector<int64_t>{13993, 6697, 5348, 5978, 3167, 4950});
  CHECK(all.rows[1].text == "稳吾到嘛？\n");

  s.max_rows = 10000;
  s.label_names = {"其他", "喜好", "悲伤", "厌恶", "愤怒", "高兴"};
  auto first = ft::read_text_data(s);
  REQUIRE(first.rows.size() == 10000u);
  auto [train, dev] = ft::split_train_dev(std::move(first), 0.08, 123);
  CHECK(train.rows.size() == 9200u);
  CHECK(dev.rows.size() == 800u);
  CHECK(dev.label_names[5] == "高兴");
}
