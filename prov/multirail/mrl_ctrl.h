/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * What the control channel's files call of each other: the transport
 * (mrl_ctrl.c) composes and queues messages for mrl_connect.c, mrl_keys.c
 * and mrl_write_data.c, and hands each what arrives for it.  The rest of
 * the provider calls the channel through mrl.h's mrl_ctrl_* functions.
 * Domain locked, every one.
 */
#ifndef MRL_CTRL_H
#define MRL_CTRL_H

#include "mrl.h"

/* ---- the transport (mrl_ctrl.c) ----------------------------------------- */

int mrl_ctrl_question_rail(const struct mrl_ep *ep,
			   const struct mrl_peer *peer);
uint32_t mrl_ctrl_new_nonce(struct mrl_ep *ep);
struct mrl_ctrl_msg *mrl_ctrl_compose(struct mrl_ep *ep,
				      struct mrl_ctrl_buf *buf,
				      struct mrl_peer *peer, int rail, int type,
				      size_t extra);
int mrl_ctrl_can_send(const struct mrl_ep *ep, const struct mrl_peer *peer,
		      size_t extra);
struct mrl_ctrl_buf *mrl_ctrl_take_tx(struct mrl_ep *ep);
void mrl_ctrl_queue_tx(struct mrl_ep *ep, struct mrl_ctrl_buf *buf);
int mrl_ctrl_send_on(struct mrl_ep *ep, struct mrl_peer *peer, int rail,
		     int type, uint64_t key, int status, const uint64_t *keys,
		     int nkeys, uint32_t near_mask, uint32_t nonce);
int mrl_ctrl_send(struct mrl_ep *ep, struct mrl_peer *peer, int type,
		  uint64_t key, uint32_t nonce);
ssize_t mrl_ctrl_post_bounce(struct mrl_ep *ep, struct mrl_ctrl_buf *b,
			     size_t len, fi_addr_t dest, uint64_t addr,
			     uint64_t key, uint64_t flags);

/* ---- WRITE_DATA (mrl_write_data.c) -------------------------------------- */

int mrl_write_data_gate(struct mrl_ep *ep, struct mrl_ctrl_buf *buf);
bool mrl_write_data_flush(struct mrl_ep *ep, struct mrl_ctrl_buf *buf);
void mrl_write_data_after_bounce(struct mrl_ep *ep, struct mrl_ctrl_buf *buf);
void mrl_write_data_arrived(struct mrl_ep *ep, struct mrl_peer *peer,
			    const struct mrl_ctrl_msg *msg);

/* ---- connections and HELLO (mrl_connect.c) ------------------------------ */

void mrl_connect_rails_opened(struct mrl_ep *ep, struct mrl_peer *peer,
			      uint32_t rails);
uint32_t mrl_connect_send_rails_up(struct mrl_ep *ep, struct mrl_peer *peer,
				   uint32_t todo);
void mrl_connect_answer_ask(struct mrl_ep *ep, struct mrl_peer *peer,
			    uint32_t asked);

/* ---- keys (mrl_keys.c) -------------------------------------------------- */

void mrl_keys_answer(struct mrl_ep *ep, struct mrl_peer *peer, uint64_t key,
		     uint32_t nonce, int rail);
const struct mrl_key_entry *mrl_keys_take(struct mrl_ep *ep,
					  struct mrl_peer *peer,
					  const struct mrl_ctrl_msg *msg);

#endif /* MRL_CTRL_H */
