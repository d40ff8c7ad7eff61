/* SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only */
/*
 * The provider's intrusive doubly linked list, its free stacks, and the
 * cast from a member back to its container: no libfabric object, so the
 * striping engine and its tests use them as the rest of the provider does.
 */
#ifndef MRL_LIST_H
#define MRL_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct mrl_list {
	struct mrl_list *next, *prev;
};

static inline void mrl_list_init(struct mrl_list *l)
{
	l->next = l->prev = l;
}

static inline bool mrl_list_empty(const struct mrl_list *l)
{
	return l->next == l;
}

static inline void mrl_list_add_tail(struct mrl_list *l, struct mrl_list *e)
{
	e->prev = l->prev;
	e->next = l;
	l->prev->next = e;
	l->prev = e;
}

static inline void mrl_list_del(struct mrl_list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e->prev = e;
}

#define mrl_container_of(ptr, type, field) \
	((type *) ((char *) (ptr) - offsetof(type, field)))

/*
 * A free stack of objects of type, linked through their field next_free
 * (which the owner may also use to queue an object that is not free):
 * name##_push and name##_pop on a top pointer, which a caller taking or
 * giving a run of objects may hold in a local and store back after.
 * One definition for every pool of the provider, typed for each.
 */
#define MRL_DECLARE_FREE_STACK(type, name)				\
static inline void name##_push(type **top, type *e)			\
{									\
	e->next_free = *top;						\
	*top = e;							\
}									\
static inline type *name##_pop(type **top)				\
{									\
	type *e = *top;							\
									\
	if (e)								\
		*top = e->next_free;					\
	return e;							\
}

#endif /* MRL_LIST_H */
