#pragma once
#import <Foundation/Foundation.h>

@interface AppDelegate : NSObject
@end

void *newThing(const char *name, void **error);
bool canDo(void *machine) API_AVAILABLE(macos(12.0));
static inline void headerInline(void) {}
