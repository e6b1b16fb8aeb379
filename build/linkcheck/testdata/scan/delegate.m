// An Objective-C file as vz and Wails write them: classes, a category, C
// functions the Go side calls, and what must not count.
#import <Cocoa/Cocoa.h>
#define GREETING @"hi" \
    " continued"

NS_ASSUME_NONNULL_BEGIN

@class Forward, Other;
@protocol Declared;

@interface AppDelegate : NSObject <NSApplicationDelegate>
- (void)notAFunction:(int)x;
@end

@protocol Helper <NSObject>
- (void)help;
@end

    @implementation AppDelegate {
    int ivar;
}
- (void)applicationDidFinishLaunching:(NSNotification *)n
{
    void nested(void); // inside a method: not file scope
    if (ivar) { return; }
}
@end

@implementation NSApplication (Airlock)
- (void)extra {}
@end

static NSString *const Hidden = @"static: internal linkage";
NSString *const Shown = @"external";
static void helper(void) {}
static inline int twice(int x) { return 2 * x; }
inline int c99inline(int x) { return x; }

/* void commented(void) {} */
void *newThing(const char *name, void **error)
{
    char *s = "void inString(void) {}";
    return NULL;
}

bool canDo(void *machine) API_AVAILABLE(macos(12.0))
{
    return true;
}

__attribute__((visibility("default"))) int attributed(void) { return 1; }

void declaredOnly(int a, int b);
extern int declaredElsewhere;
typedef struct { int a; } Pair;
struct Named { int b; } namedVar;
enum { A, B };
int counter, table[4] = {1, 2, 3, 4};
void (*callback)(void (*fn)(void *), void *, size_t);
void (^block)(void) = ^{ };

NS_ASSUME_NONNULL_END
