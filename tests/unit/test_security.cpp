// What ft refuses to trust (docs/hardening.md "Security"): the rendezvous
// store listens only on the master address, plugins load only from the
// configured directories, safetensors sizes are checked before use.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <future>
#include <sstream>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "ft/comm/comm.h"
#include "ft/comm/dist_env.h"
#include "ft/comm/launcher.h"
#include "ft/plugin/plugin_host.h"
#include "ft/io/safetensors.h"
#include "ft_test.h"

namespace {

namespace fsys = std::filesystem;

// Local addresses of the sockets listening on TCP `port`, as "a.b.c.d" from
// /proc/net/tcp and "[v6 hex]" from /proc/net/tcp6.
std::vector<std::string> listeners(int port) {
  std::vector<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state != "0A") continue;  // TCP_LISTEN
      const auto colon = local.rfind(':');
      if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
      const std::string hex = local.substr(0, colon);
      if (hex.size() == 8) {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));  // kernel byte order as printed
        char text[INET_ADDRSTRLEN];
        out.push_back(::inet_ntop(AF_INET, &a, text, sizeof(text)));
      } else {
        out.push_back("[" + hex + "]");
      }
    }
  }
  return out;
}

bool accepts(const std::string& addr, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

ft::DistEnv rank_env(int rank, const std::string& addr, int port) {
  ft::DistEnv env;
  env.rank = env.local_rank = rank;
  env.world_size = env.local_world_size = 2;
  env.master_addr = addr;
  env.master_port = port;
  env.source = "torchrun";
  return env;
}

}  // namespace

TEST_CASE("the rendezvous store listens on the master address only") {
  // 127.0.0.2 is loopback too, but not the address a wildcard or a
  // "localhost" bind would show: only a bind to the master address gives it.
  const std::string master = "127.0.0.2";
  const int port = ft::pick_free_port(master);
  ft::CommOptions options;
  options.timeout = std::chrono::milliseconds(20000);
  auto peer = std::async(std::launch::async, [&] { return ft::Comm::create(rank_env(1, master, port), options); });
  auto rank0 = ft::Comm::create(rank_env(0, master, port), options);
  auto rank1 = peer.get();
  REQUIRE(rank0->world_size() == 2);
  CHECK(listeners(port) == std::vector<std::string>{master});
  CHECK(accepts(master, port));
  CHECK_FALSE(accepts("127.0.0.1", port));
  // The store works for the group it set up: a real collective over it.
  auto t0 = at::ones({3}), t1 = at::full({3}, 2.0);
  auto w1 = std::async(std::launch::async, [&] { rank1->all_reduce(t1); });
  rank0->all_reduce(t0);
  w1.get();
  CHECK(t0[0].item<double>() == 3.0);
  CHECK(t1[2].item<double>() == 3.0);
}

TEST_CASE("a master address this host does not have is refused by name") {
  ft::CommOptions options;
  options.timeout = std::chrono::milliseconds(2000);
  const std::string message = ft_test::error_of([&] { ft::Comm::create(rank_env(0, "192.0.2.1", 29125), options); });
  CHECK(message.find("rank 0 could not start the rendezvous store on 192.0.2.1:29125") != std::string::npos);
}

TEST_CASE("plugins: a symlink may rename a plugin, not bring one in from elsewhere") {
  ft_test::TempDir tmp("security-plugins");
  const fsys::path good = fsys::canonical(ft_test::binary_dir() / "test-plugins" / "good" / "libft_strategy_good.so");
  REQUIRE(fsys::exists(good));
  const fsys::path inside = tmp.path() / "inside", outside = tmp.path() / "outside";
  fsys::create_directories(inside);
  fsys::create_directories(outside);
  fsys::copy_file(good, inside / "libft_strategy_real.so");
  fsys::create_symlink("libft_strategy_real.so", inside / "libft_strategy_alias.so");
  fsys::create_symlink(good, outside / "libft_strategy_good.so");

  ft::DiscoveryOptions options;
  options.use_builtin = false;
  options.plugin_dirs = {inside};
  const auto ok = ft::PluginHost::discover(options);
  CHECK(ok.warnings().empty());  // the alias is the same file: loaded once
  REQUIRE(ok.list().size() == 2);
  CHECK(ok.list()[0].file == fsys::canonical(inside / "libft_strategy_real.so"));
  CHECK(ok.list()[0].file.is_absolute());

  options.plugin_dirs = {outside};
  const auto refused = ft::PluginHost::discover(options);
  CHECK(refused.list().empty());
  REQUIRE(refused.warnings().size() == 1);
  CHECK(refused.warnings()[0] == fmt::format("{}: a symlink to {}, outside {}; refused (plugins load only from the "
                                             "configured directories)",
                                             (fsys::canonical(outside) / "libft_strategy_good.so").string(),
                                             good.string(), fsys::canonical(outside).string()));
}

TEST_CASE("plugins: relative FT_PLUGIN_PATH entries and world-writable places are refused") {
  ft_test::TempDir tmp("security-perms");
  const fsys::path good = ft_test::binary_dir() / "test-plugins" / "good" / "libft_strategy_good.so";
  ft::DiscoveryOptions options;
  options.use_builtin = false;
  options.plugin_path = "test-plugins/good";
  auto host = ft::PluginHost::discover(options);
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  CHECK(host.warnings()[0] == "test-plugins/good (FT_PLUGIN_PATH): a relative directory; ignored, use an absolute path");

  const fsys::path dir = fsys::canonical(tmp.path());
  fsys::copy_file(good, dir / "libft_strategy_good.so");
  fsys::permissions(dir / "libft_strategy_good.so", fsys::perms::others_write, fsys::perm_options::add);
  options.plugin_path = dir.string();
  host = ft::PluginHost::discover(options);
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  CHECK(host.warnings()[0] == (dir / "libft_strategy_good.so").string() + ": writable by every user (chmod o-w it); refused");

  fsys::permissions(dir / "libft_strategy_good.so", fsys::perms::others_write, fsys::perm_options::remove);
  fsys::permissions(dir, fsys::perms::others_write, fsys::perm_options::add);
  host = ft::PluginHost::discover(options);
  CHECK(host.list().empty());
  REQUIRE(host.warnings().size() == 1);
  CHECK(host.warnings()[0] ==
        dir.string() + " (FT_PLUGIN_PATH): writable by every user (chmod o-w it); no plugins loaded from it");
  fsys::permissions(dir, fsys::perms::others_write, fsys::perm_options::remove);
  host = ft::PluginHost::discover(options);
  CHECK(host.warnings().empty());
  CHECK(host.list().size() == 2);
}

TEST_CASE("safetensors: sizes in the header are checked before anything is allocated or dumped") {
  auto file = [](const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
    return out + header + data;
  };
  auto error = [](const std::string& bytes) {
    return ft_test::error_of([&] { ft::safetensors::load_bytes(bytes, "x.safetensors"); });
  };
  // 2^61 floats claimed, 8 bytes present: refused, not allocated.
  CHECK(error(file(R"({"a":{"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,8]}})", std::string(8, '\0')))
            .find("data_offsets span 8 bytes") != std::string::npos);
  // Element count overflowing 64 bits.
  CHECK(error(file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})",
                   std::string(8, '\0')))
            .find("more elements than can be addressed") != std::string::npos);
  // Offsets near 2^63: no wrap-around when added to the data start.
  CHECK(error(file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[9223372036854775800,9223372036854775807]}})",
                   std::string(8, '\0')))
            .find("past the end of the data buffer") != std::string::npos);
  // A header nested a million deep: an error naming the tensor, not a stack overflow.
  const std::string deep = R"({"a":)" + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  CHECK(error(file(deep, "")) ==
        "x.safetensors: tensor 'a': expected an object with dtype, shape, data_offsets, got a deeply nested array");
  // An over-long value is quoted cut short.
  std::string list = "[1";
  for (int i = 0; i < 100000; ++i) list += ",1";
  const std::string long_dtype = R"({"a":{"dtype":)" + list + R"(],"shape":[1],"data_offsets":[0,1]}})";
  const std::string message = error(file(long_dtype, std::string(1, '\0')));
  CHECK(message.rfind("x.safetensors: tensor 'a': dtype must be a string, got [1,1,1,", 0) == 0);
  CHECK(message.size() < 200);
}
