package boot

import "testing"

func TestSetUserIDs(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\nagentx:x:5:5::/:/bin/sh"
	want := "root:x:0:0:root:/root:/bin/sh\nagent:x:501:20:agent:/home/agent:/bin/sh\nagentx:x:5:5::/:/bin/sh"
	if got := setUserIDs(passwd, "agent", 501, 20, false); got != want {
		t.Errorf("passwd:\n%s", got)
	}
	group := "root:x:0:\nagent:x:1000:\nbroken:line\n"
	want = "root:x:0:\nagent:x:20:\nbroken:line\n"
	if got := setUserIDs(group, "agent", 501, 20, true); got != want {
		t.Errorf("group:\n%s", got)
	}
}
