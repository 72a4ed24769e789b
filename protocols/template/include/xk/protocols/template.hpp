#pragma once
// The template protocol: a small but complete layer to copy when adding a new
// one (see README.md beside this folder). It puts a 4-byte header (tag,
// length) in front of each message and keeps one session per tag:
//
//   open(upper, {remote: ..., tag})  -> a session that sends with that tag
//   open_enable(upper, {local: tag}) -> messages for an unknown tag create a
//                                       session and tell `upper` (open_done)
//   demux(lower, msg)                -> active map, else passive map, else drop
//
// It sits on exactly one lower protocol.

#include <cstdint>

#include "xk/demux.hpp"
#include "xk/graph.hpp"
#include "xk/protocol.hpp"

namespace xk::tmpl {

class TemplateProtocol;

class TemplateSession final : public Session {
 public:
  TemplateSession(TemplateProtocol& proto, Protocol* upper, std::uint16_t tag, SessionRef lower);

  Status push(Msg msg) override;
  Status pop(Session& lower, Msg msg) override;
  Status close() override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  std::uint16_t tag() const noexcept { return tag_; }

 private:
  TemplateProtocol& proto_;
  std::uint16_t tag_;
  SessionRef lower_;
};

class TemplateProtocol final : public Protocol {
 public:
  TemplateProtocol(std::string name, Protocol& below);
  ~TemplateProtocol() override;

  Result<SessionRef> open(Protocol& upper, Participants& parts) override;
  Status open_enable(Protocol& upper, Participants& parts) override;
  Status open_disable(Protocol& upper, Participants& parts) override;
  Status demux(Session& lower, Msg msg) override;
  Result<ControlReply> control_any(const ControlQuery& query) override;

  std::size_t session_count() const noexcept { return active_.size(); }

 private:
  friend class TemplateSession;
  Result<SessionRef> lower_session();

  struct Key {
    std::uint16_t tag;
    friend bool operator==(const Key&, const Key&) = default;
  };

  Protocol& below_;
  SessionRef lower_;  // one session on the lower protocol carries every tag
  bool lower_enabled_ = false;
  ActiveMap<Key> active_;
  EnableTable<Key> passive_;
  Counter& rx_msgs_;
  Counter& tx_msgs_;
  Counter& drop_malformed_;
};

// Make the kind `template` available to graph specs:
//   template t0 below=lo0
void register_template(Registry& registry);

}  // namespace xk::tmpl
